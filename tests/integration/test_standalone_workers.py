"""The multi-process `broker standalone --workers N` (broker/workers.py), through the real CLI and the official client.

Bookies and broker workers are child processes of a supervisor that serves the
embedded metadata store; topics land on different workers behind one
advertised address; a worker killed with kill -9 has its bundles taken over
and is restarted; SIGTERM, or the supervisor's own death, leaves no child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

from storage.testing.processes import VENV_BIN, BrokerProcess, process_alive as alive, standalone_children
from storage.testing.waiting import wait_until

WORKERS = 2


def owner_url(broker: BrokerProcess, topic: str) -> str:
    with urllib.request.urlopen(f"{broker.web_url}/lookup/v2/topic/persistent/{topic.split('://', 1)[1]}",
                                timeout=30) as resp:
        return json.loads(resp.read())["brokerUrl"]


def official_client(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


@pytest.fixture
def workers_standalone(tmp_path):
    started: list[BrokerProcess] = []

    def start(data_dir: Path | None = None, workers: int | None = WORKERS, env: dict | None = None,
              **options) -> BrokerProcess:
        broker = BrokerProcess(data_dir or tmp_path / "data", workers=workers, env=env or {}, **options)
        started.append(broker)
        return broker.start(timeout_s=120)

    yield start
    for broker in started:
        broker.stop(timeout_s=60)


def topics_on_each_worker(broker: BrokerProcess, client: pulsar.Client, prefix: str) -> dict[str, str]:
    """One topic per worker, owner URL -> topic: producing to a topic makes its bundle owned somewhere."""
    by_owner: dict[str, str] = {}
    for i in range(64):
        topic = f"persistent://public/default/{prefix}-{i}"
        client.create_producer(topic).close()  # the lookup assigns the bundle
        by_owner.setdefault(owner_url(broker, topic), topic)
        if len(by_owner) == WORKERS:
            return by_owner
    raise AssertionError(f"64 topics all landed on {list(by_owner)}")


def test_topics_land_on_every_worker_and_a_killed_worker_is_taken_over_and_restarted(workers_standalone):
    broker = workers_standalone()
    children = standalone_children(broker.proc.pid)
    assert sorted(children) == ["bookie-a", "bookie-b", "bookie-c"] + [f"worker-{i}" for i in range(WORKERS)]
    # Scripts wait for " ready (": the supervisor's line is the only one that has it, after every child's.
    output = broker.log_since_start()
    assert output.count(" ready (") == 1 and output.index(" ready (") > output.rindex("[worker-1] broker ")
    client = official_client(broker)
    try:
        by_owner = topics_on_each_worker(broker, client, "spread")
        assert broker.service_url in by_owner  # worker 0, on the advertised port, owns some
        # Every worker serves its own topics, reached through the one advertised address.
        for topic in by_owner.values():
            producer = client.create_producer(topic, batching_enabled=True)
            for i in range(200):
                producer.send_async(f"{i}".encode(), None)
            producer.flush()
            producer.close()
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            assert [consumer.receive(30_000).data() for _ in range(200)] == [f"{i}".encode() for i in range(200)]
            consumer.close()

        victim_topic = next(t for url, t in by_owner.items() if url != broker.service_url)
        victim_url = owner_url(broker, victim_topic)
        producer = client.create_producer(victim_topic, batching_enabled=False)
        producer.send(b"before")
        os.kill(children["worker-1"], signal.SIGKILL)

        # The producer's next send goes to whichever worker now owns the bundle, after it fenced the ledgers.
        producer.send(b"after")
        producer.close()
        consumer = client.subscribe(victim_topic, "s")  # nothing acknowledged there yet: all 202 come again
        received = []
        while len(received) < 202:
            received.append(consumer.receive(30_000).data())
        assert received == [f"{i}".encode() for i in range(200)] + [b"before", b"after"]

        log = lambda: broker.log_since_start()  # noqa: E731
        wait_until(lambda: "worker-1 (pid" in log() and "exited with status -9" in log(), 30,
                   "the supervisor to report the killed worker")
        wait_until(lambda: log().count("[worker-1] broker ") >= 2 and
                   log().rsplit("exited with status -9", 1)[1].count("[worker-1] broker ") >= 1, 120,
                   "the killed worker to be restarted and ready")
        restarted = standalone_children(broker.proc.pid)
        assert restarted["worker-1"] != children["worker-1"]
        assert {k: v for k, v in restarted.items() if k != "worker-1"} == {
            k: v for k, v in children.items() if k != "worker-1"}
        assert owner_url(broker, victim_topic) in {broker.service_url, victim_url}
    finally:
        client.close()


def test_a_killed_bookie_returns_sigterm_stops_every_child_and_the_data_restarts_in_either_mode(workers_standalone, tmp_path):
    broker = workers_standalone()
    children = standalone_children(broker.proc.pid)
    assert len(children) == 3 + WORKERS
    client = official_client(broker)
    topics = list(topics_on_each_worker(broker, client, "durable").values())
    producers = [client.create_producer(topic) for topic in topics]
    for topic, producer in zip(topics, producers):
        for i in range(25):
            producer.send(f"{topic[-1]}{i}".encode())
    # A bookie killed with kill -9 comes back under its own id: its cookie still matches its data.
    os.kill(children["bookie-a"], signal.SIGKILL)
    wait_until(lambda: broker.log_since_start().count("[bookie-a] bookie standalone-bookie-a serving (") == 2, 120,
               "the killed bookie to be restarted and ready")
    for topic, producer in zip(topics, producers):
        for i in range(25, 50):
            producer.send(f"{topic[-1]}{i}".encode())
        producer.close()
    client.close()
    children = standalone_children(broker.proc.pid)

    assert broker.stop(timeout_s=60) == 0
    assert not [name for name, pid in children.items() if alive(pid)], "children left behind by SIGTERM"
    assert not (tmp_path / "data" / "metadata.sock").exists()

    # Same data, same bookie ids and cookies: the single-process mode reads what the workers wrote.
    single = workers_standalone(tmp_path / "data", workers=None)
    client = official_client(single)
    try:
        for topic in topics:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert [reader.read_next(30_000).data() for _ in range(50)] == [f"{topic[-1]}{i}".encode() for i in range(50)]
            reader.close()
    finally:
        client.close()


def test_children_die_with_a_killed_supervisor(workers_standalone):
    broker = workers_standalone()
    children = standalone_children(broker.proc.pid)
    broker.kill9()
    wait_until(lambda: not [pid for pid in children.values() if alive(pid)], 60,
               lambda: f"children to exit after the supervisor's kill -9; alive: "
                       f"{[n for n, p in children.items() if alive(p)]}")


@pytest.mark.parametrize("flags, reason", [
    (["--workers", "0"], "--workers must be between 1 and 64"),
    (["--workers", "2", "--port", "0"], "port 0 (any) cannot be the cluster's advertised port"),
    # The default ledgers are E2/Qw2/Qa2: one bookie cannot hold an ensemble, in either mode.
    (["--bookies", "1"], "--bookies 1 is fewer than the ledger ensemble size managedLedgerDefaultEnsembleSize"),
    (["--single-process", "--bookies", "1"], "run --bookies 2 or more, or lower E/Qw/Qa (now 2/2/2)"),
    (["--bookies", "27"], "--bookies must be between 1 and 26, not 27"),
])
def test_a_plan_that_cannot_work_is_refused_before_any_child_starts(tmp_path, flags, reason):
    from storage.testing.processes import VENV_BIN, free_port

    result = subprocess.run([str(VENV_BIN / "broker"), "standalone", "--data-dir", str(tmp_path / "data"),
                             "--http-port", str(free_port()), "--stream-port", str(free_port()), *flags],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert reason in result.stderr
    assert "ready (" not in result.stdout and not (tmp_path / "data" / "metadata.sock").exists()



def test_token_lookups_over_http_reach_topics_of_every_worker(workers_standalone, tmp_path):
    """The official client looking topics up over HTTP with a token (pulsar_test.py's test_token_auth). A bundle
    placed on another worker used to be a 307 to that worker's port, and libcurl drops Authorization on a
    redirect to another port: the lookup arrived anonymous and was refused. The chosen worker's answer is now
    relayed (broker/http/lookup.py)."""
    cli = str(VENV_BIN / "broker")
    secret = tmp_path / "secret.key"
    subprocess.run([cli, "tokens", "create-secret-key", "--output", str(secret)], check=True)
    token = subprocess.run([cli, "tokens", "create", "--secret-key", f"file://{secret}", "--subject", "operator"],
                           check=True, capture_output=True, text=True).stdout.strip()
    broker = workers_standalone(env={
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true", "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token",
        "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{secret}", "MAGNETAR_BROKER_AUTHENTICATE_METRICS_ENDPOINT": "true"})
    client = pulsar.Client(broker.web_url, authentication=pulsar.AuthenticationToken(token),
                           operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for i in range(32):
            topic = f"persistent://public/default/http-token-{i}"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            producer.send(b"m-%d" % i)
            assert consumer.receive(timeout_millis=30_000).data() == b"m-%d" % i
            producer.close()
            consumer.close()
            if len(_workers_owning_bundles(broker)) == WORKERS:
                break
        assert len(_workers_owning_bundles(broker)) == WORKERS, "all topics landed on one worker: nothing relayed"
        # With authenticateMetricsEndpoint, worker 0 passes the scraper's token on to the other workers.
        scrape = urllib.request.Request(f"{broker.web_url}/metrics", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(scrape, timeout=30) as resp:
            text = resp.read().decode()
        assert all(f'magnetar_worker_up{{worker="{i}"}} 1.0' in text for i in range(WORKERS)), text[-500:]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=30)
        assert refused.value.code == 401
    finally:
        client.close()


def _workers_owning_bundles(broker: BrokerProcess) -> set[int]:
    """The workers that took a bundle of public/default in this run (their ownership log lines)."""
    return {i for line in broker.log_since_start().splitlines() for i in range(WORKERS)
            if f"[worker-{i}] broker.ownership.ownership" in line and "now owns bundle /namespace/public/default/" in line}


def test_topic_admin_through_the_advertised_port_reaches_the_worker_that_serves_the_topic(workers_standalone):
    """pulsar_test.py's compaction tests PUT .../compaction with urllib, which follows a 307 only for GET: the
    worker behind the advertised port sends a request for another worker's topic on (broker/http/forwarding.py)."""
    broker = workers_standalone()
    client = official_client(broker)
    try:
        by_owner = topics_on_each_worker(broker, client, "admin")
        for topic in by_owner.values():
            producer = client.create_producer(topic)
            producer.send(b"v", partition_key="k")
            producer.close()
            path = f"{broker.web_url}/admin/v2/persistent/{topic.split('://', 1)[1]}"
            put = urllib.request.Request(f"{path}/compaction", data=b"", method="PUT")
            with urllib.request.urlopen(put, timeout=30) as resp:
                assert resp.status == 204
            wait_until(lambda: _json_at(f"{path}/compaction")["status"] == "SUCCESS", timeout_s=30,
                       what=f"compaction of {topic} through the advertised port")
            assert _json_at(f"{path}/stats")["msgInCounter"] == 1
    finally:
        client.close()


def _json_at(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def test_one_scrape_of_the_advertised_metrics_covers_the_topics_of_every_worker(workers_standalone):
    """Prometheus and the Grafana dashboard scrape the advertised HTTP port, worker 0's: it merges the other
    workers' expositions into its own (broker/http/workers_metrics.py)."""
    from prometheus_client.parser import text_string_to_metric_families

    broker = workers_standalone()
    client = official_client(broker)
    try:
        by_owner = topics_on_each_worker(broker, client, "scraped")
        sent = {}
        for n, topic in enumerate(by_owner.values(), start=3):
            consumer = client.subscribe(topic, "dash")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(n):
                producer.send(b"m%d" % i)
            producer.close()
            consumer.close()
            sent[topic] = n
        with urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        client.close()
    series: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):  # Prometheus's parser: also refuses duplicate families
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            assert key not in series.setdefault(sample.name, {}), f"duplicate series {sample.name}{dict(key)}"
            series[sample.name][key] = sample.value

    def of_topic(name: str, topic: str, **labels) -> float:
        wanted = {"cluster": "standalone", "namespace": "public/default", "topic": topic, **labels}
        return series[name][tuple(sorted(wanted.items()))]

    for topic, n in sent.items():  # one topic owned by each worker, both in the one scrape
        assert of_topic("pulsar_in_messages_total", topic) == n
        assert of_topic("pulsar_subscription_back_log", topic, subscription="dash") == n
    assert series["magnetar_worker_up"] == {(("worker", str(i)),): 1.0 for i in range(WORKERS)}
    topics_seen = {dict(k)["topic"] for k in series["pulsar_storage_size"]}
    assert series["pulsar_topics_count"][()] == len(topics_seen) >= len(sent)  # the host's topics, summed
    assert set(series["magnetar_stats_samples_total"]) == {(("worker", str(i)),) for i in range(WORKERS)}
    # The Grafana dashboard's broker metrics are all in the merged scrape.
    from tests.official_client.test_metrics import DASHBOARD, dashboard_queries, promql_metric_names

    used = set().union(*map(promql_metric_names, dashboard_queries(json.loads(DASHBOARD.read_text()))))
    assert sorted(n for n in used if n.startswith("pulsar_") and n not in series) == []


def test_four_bookies_register_and_serve_produce_and_consume_in_either_mode(workers_standalone, tmp_path):
    """``--bookies 4``: four bookie processes (ids a..d, zones a, b, c, a), all registered; ledgers of E2 are placed
    on them and the official client's messages come back, then again from ``--single-process --bookies 4``."""
    from storage.testing.processes import free_port_block

    broker = workers_standalone(bookie_port=free_port_block(4), extra_args=["--bookies", "4"])
    assert sorted(standalone_children(broker.proc.pid)) == [f"bookie-{z}" for z in "abcd"] + [
        f"worker-{i}" for i in range(WORKERS)]
    assert "4 bookie processes, data in" in broker.log_since_start()
    registered = _json_at(f"{broker.web_url}/admin/v2/bookies/all")["bookies"]
    assert sorted(b["bookieId"] for b in registered) == [f"standalone-bookie-{z}" for z in "abcd"]
    racks = _json_at(f"{broker.web_url}/admin/v2/bookies/racks-info")["default"]
    assert racks["standalone-bookie-d"]["rack"] == "/zone-a/ud3"
    client = official_client(broker)
    try:
        topics = list(topics_on_each_worker(broker, client, "four-bookies").values())
        for topic in topics:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=True)
            for i in range(100):
                producer.send_async(b"%d" % i, None)
            producer.flush()
            producer.close()
            assert [consumer.receive(30_000).data() for _ in range(100)] == [b"%d" % i for i in range(100)]
            consumer.close()
    finally:
        client.close()
    assert broker.stop(timeout_s=60) == 0

    single = workers_standalone(tmp_path / "data", workers=None, bookie_port=free_port_block(4),
                                extra_args=["--bookies", "4"])
    assert single.log_since_start().count(" serving (bookie://") == 4
    client = official_client(single)
    try:
        for topic in topics:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert [reader.read_next(30_000).data() for _ in range(100)] == [b"%d" % i for i in range(100)]
            reader.close()
    finally:
        client.close()


def _send(url: str, method: str, headers: dict | None = None) -> int:
    """The status of a request with no body (a redirect is answered, not followed)."""
    request = urllib.request.Request(url, data=b"" if method != "GET" else None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_unload_and_the_namespace_actions_through_the_advertised_port_reach_every_worker(workers_standalone):
    """The operator console calls worker 0 for every topic and namespace: a topic's unload, a namespace's clear
    backlog and unload reach the workers that serve them (each bundle's owner, as Pulsar asks), and a bundle
    unload a browser sends (Sec-Fetch-Site) is sent on to its owner rather than redirected to another origin."""
    broker = workers_standalone()
    client = official_client(broker)
    admin = f"{broker.web_url}/admin/v2"
    try:
        by_owner = topics_on_each_worker(broker, client, "console")
        for topic in by_owner.values():
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic)
            first = producer.send(b"before the unload")
            assert _send(f"{admin}/persistent/{topic.split('://', 1)[1]}/unload", "PUT") == 204
            # Unloaded where it was served: the owner's managed ledger closed its ledger, the next one is new.
            assert producer.send(b"after the unload").ledger_id() > first.ledger_id(), topic
            producer.close()

        def backlogs() -> list[int]:
            return [_json_at(f"{admin}/persistent/{t.split('://', 1)[1]}/stats")["subscriptions"]["s"]["msgBacklog"]
                    for t in by_owner.values()]

        assert backlogs() == [2] * WORKERS
        # The console's topic list, asked of worker 0, has each topic's numbers from the worker serving it (its
        # counters since it was loaded again: the message after the unload).
        rows = {r["name"]: r for r in _json_at(f"{broker.web_url}/admin/magnetar/v1/namespaces/public/default/topics"
                                               "?filter=console-&limit=500")["topics"]}
        for topic in by_owner.values():
            assert rows[topic]["loaded"] and rows[topic]["msgInCounter"] == 1 and rows[topic]["msgBacklog"] == 2, \
                rows[topic]
        assert _send(f"{admin}/namespaces/public/default/clearBacklog", "POST") == 204
        assert backlogs() == [0] * WORKERS
        assert _send(f"{admin}/namespaces/public/default/unload", "PUT") == 204
        owned = f"{broker.web_url}/admin/magnetar/v1/metadata?path=/namespace/public/default"
        assert _json_at(owned)["children"] == [], "a bundle of public/default is still owned"

        # A bundle another worker owns: a script is redirected (Pulsar's 307), a browser's request is sent on.
        topics_on_each_worker(broker, client, "bundle")  # every worker owns a bundle again
        for bundle in _json_at(owned)["children"]:
            url = f"{admin}/namespaces/public/default/{bundle}/unload"
            owner = _json_at(f"{owned}/{bundle}")["data"]["value"]
            if owner["nativeUrl"] == broker.service_url:
                continue
            assert _send(url, "PUT") == 307
            assert _send(url, "PUT", {"Sec-Fetch-Site": "same-origin"}) == 204
            assert bundle not in _json_at(owned)["children"]
            break
        else:
            raise AssertionError(f"no bundle of public/default owned by another worker than {broker.service_url}")
    finally:
        client.close()
