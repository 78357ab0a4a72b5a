"""Prometheus metrics of a real `broker standalone` and its bookies, after real traffic from the official client:
Pulsar's names and labels, rates over the stats window (not between scrapes), measured add latency and cache hits,
the bookies' printed metrics addresses, and the Grafana dashboard in docs/ checked against the scrape."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from storage.testing.processes import BrokerProcess, free_port_block, http_json
from storage.testing.waiting import wait_until

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "magnetar.json"
BOOKIE_LINE = re.compile(r"^bookie (\S+) serving \(bookie://[^:]+:(\d+), metrics (http://\S+/metrics); zone (\w)\)$",
                         re.MULTILINE)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """Sampled every 0.5 s, so rates show within a second; the window is Pulsar's 60 s. The bookies' HTTP ports
    are the harness's default 0 (each binds a free one, and the start-up lines name it): a block chosen in advance
    can be taken by another process on this shared machine before the bookies bind it."""
    broker = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data",
                           env={"MAGNETAR_BROKER_STATS_SAMPLE_INTERVAL_S": "0.5"})
    broker.start(timeout_s=60)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def client(standalone):
    c = pulsar.Client(standalone.service_url, operation_timeout_seconds=15,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=15) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else None


def broker_metrics(standalone):
    return scrape(f"{standalone.web_url}/metrics")


def bookie_urls(standalone) -> dict[str, tuple[int, str, str]]:
    """bookie id -> (data port, metrics URL, zone), as the standalone printed them at start."""
    return {m[1]: (int(m[2]), m[3], m[4]) for m in BOOKIE_LINE.finditer(standalone.log_path.read_text())}


def produce_and_consume(client, topic: str, n: int, sub: str = "s") -> None:
    consumer = client.subscribe(topic, sub)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(b"m" * 100)
    for _ in range(n):
        consumer.acknowledge(consumer.receive(timeout_millis=15_000))
    producer.close()
    consumer.close()


def test_rates_come_from_the_window_so_two_scrapes_agree(standalone, client, topic):
    produce_and_consume(client, topic, 40)
    t = {"topic": topic}

    def rated():
        m = broker_metrics(standalone)
        return m if (value(m, "pulsar_rate_in", **t) or 0) > 0 and (value(m, "pulsar_rate_out", **t) or 0) > 0 else None

    wait_until(rated, 20, "the topic's rates in the stats window")

    # Nothing is produced any more: a rate "since the last scrape" would read 0 in the second scrape. From the
    # window, two scrapes between the same two samples read the same (a pair that straddles a sample is retried).
    def agreeing_pair():
        first, second = broker_metrics(standalone), broker_metrics(standalone)
        samples = "magnetar_stats_samples_total"
        if value(first, samples) is not None and value(first, samples) != value(second, samples):
            return None
        return first, second

    first, second = wait_until(agreeing_pair, 20, "two scrapes between the same two samples")
    for name, labels in (("pulsar_rate_in", t), ("pulsar_rate_out", t), ("pulsar_throughput_in", t),
                         ("pulsar_throughput_out", t), ("pulsar_subscription_msg_rate_out", {**t, "subscription": "s"})):
        assert value(first, name, **labels) == value(second, name, **labels) > 0, name
    # 40 messages of 100 bytes + metadata, all within the 60 s window: bytes/s over msg/s is the message size.
    assert value(first, "pulsar_throughput_in", **t) / value(first, "pulsar_rate_in", **t) > 100
    assert value(first, "pulsar_in_bytes_total", **t) == value(first, "pulsar_out_bytes_total", **t) > 40 * 100
    assert value(first, "magnetar_stats_window_seconds") > 0

    # The admin stats give Pulsar's rate fields from the same window.
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    with urllib.request.urlopen(f"{standalone.web_url}{path}", timeout=15) as resp:
        stats = json.loads(resp.read())
    assert stats["msgRateIn"] > 0 and stats["msgRateOut"] > 0 and stats["msgThroughputIn"] > 100 * stats["msgRateIn"]
    assert stats["subscriptions"]["s"]["msgRateOut"] > 0 and stats["subscriptions"]["s"]["msgRateRedeliver"] == 0


def test_add_latency_entry_sizes_and_cache_are_measured(standalone, client, topic):
    produce_and_consume(client, topic, 25)
    t = {"topic": topic}

    def counted():
        m = broker_metrics(standalone)
        return m if value(m, "pulsar_storage_write_latency_count", **t) == 25 else None

    m = wait_until(counted, 20, "25 adds in the window's write latency count")
    buckets = [n for (n, ls), _ in m.items() if n.startswith("pulsar_storage_write_latency_le_")
               and ("topic", topic) in ls]
    assert len(buckets) == 10 and sum(value(m, n, **t) for n in buckets) == 25
    assert value(m, "pulsar_storage_write_latency_sum", **t) > 0  # milliseconds, really measured
    assert value(m, "pulsar_entry_size_le_512", **t) == 25  # each entry: 100 bytes of payload plus headers
    assert value(m, "pulsar_entry_size_count", **t) == 25
    ns = {"namespace": "public/default"}
    assert value(m, "pulsar_ml_AddEntrySucceed", **ns) >= 25
    assert value(m, "pulsar_ml_AddEntryMessagesRate", **ns) > 0
    assert sum(v for (n, ls), v in m.items() if n == "pulsar_ml_AddEntryLatencyBuckets"
               and ("namespace", "public/default") in ls) >= 25
    # The consumer kept up with the producer: its reads were served by the entry cache.
    assert value(m, "pulsar_ml_cache_hits_rate") > 0
    assert value(m, "pulsar_ml_cache_used_size") > 0
    assert value(m, "pulsar_storage_write_rate", **t) > 0 and value(m, "pulsar_storage_read_rate", **t) > 0


def test_a_large_message_sent_while_small_ones_flow_is_paced_and_counted(standalone, client, topic):
    paced = "magnetar_bookie_client_bulk_add_paced_seconds_total"
    before = value(broker_metrics(standalone), paced)
    assert before is not None
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"small")  # a small add: the next second's large adds are paced (storage/client/pacing.py)
    producer.send(b"L" * (2 * 1024 * 1024))
    producer.close()
    # 2 MiB in 256 KiB slices at the default 64 MiB/s to each of the Qw bookies: at least 7 pauses of 3.9 ms each.
    assert value(broker_metrics(standalone), paced) - before >= 7 * (256 / (64 * 1024))


def test_unacked_delayed_and_backlog(standalone, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    held = client.subscribe(topic, "held", consumer_type=pulsar.ConsumerType.Shared)
    later = client.subscribe(topic, "later", consumer_type=pulsar.ConsumerType.Shared)
    for _ in range(3):
        producer.send(b"now")
    for _ in range(2):
        producer.send(b"later", deliver_after=__import__("datetime").timedelta(minutes=10))
    received = [held.receive(timeout_millis=15_000) for _ in range(3)]  # received, not acknowledged
    t = {"topic": topic}

    def settled():
        m = broker_metrics(standalone)
        return m if (value(m, "pulsar_subscription_unacked_messages", **t, subscription="held") == 3
                     and value(m, "pulsar_subscription_delayed", **t, subscription="held") == 2) else None

    m = wait_until(settled, 20, "3 unacked and 2 delayed on 'held'")
    assert value(m, "pulsar_subscription_back_log", **t, subscription="later") == 5
    assert value(m, "pulsar_storage_backlog_size", **t) > 0
    assert value(m, "pulsar_msg_backlog", **t) == 10
    for msg in received:
        held.acknowledge(msg)
    wait_until(lambda: value(broker_metrics(standalone), "pulsar_subscription_unacked_messages", **t,
                             subscription="held") == 0, 20, "the acknowledgements to clear the unacked count")
    held.close()
    later.close()
    producer.close()


def test_standalone_bookies_serve_metrics_where_they_said(standalone, client, topic):
    produce_and_consume(client, topic, 5)
    printed = bookie_urls(standalone)
    assert sorted(printed) == ["standalone-bookie-a", "standalone-bookie-b", "standalone-bookie-c"]
    synced = []
    for i, bookie_id in enumerate(sorted(printed)):
        port, url, zone = printed[bookie_id]
        assert (port, zone) == (standalone.bookie_port + i, "abc"[i]) and url.startswith("http://127.0.0.1:")
        m = scrape(url)  # the printed address serves this bookie's metrics
        assert value(m, "bookie_SERVER_STATUS") == 1
        assert value(m, "bookie_disk_usage_bytes") > 0
        assert value(m, "bookie_disk_usage_ratio") > 0
        synced.append(value(m, "bookie_journal_fsync_latency_seconds_count"))
    # The topic's ledger is written to its write quorum (2 of the 3 bookies; which 2 is the placement's choice, and
    # earlier tests' ledgers may have used the third): at least those two synced the adds.
    assert sum(1 for n in synced if n > 0) >= 2, synced

    # Read-only shows as 0 (BookKeeper's meaning); writable again as 1.
    base = printed["standalone-bookie-c"][1].removesuffix("/metrics")
    http_json("PUT", f"{base}/api/v1/bookie/state/readonly", {"readOnly": True})
    try:
        wait_until(lambda: value(scrape(f"{base}/metrics"), "bookie_SERVER_STATUS") == 0, 20, "bookie c read-only")
    finally:
        http_json("PUT", f"{base}/api/v1/bookie/state/readonly", {"readOnly": None})
    wait_until(lambda: value(scrape(f"{base}/metrics"), "bookie_SERVER_STATUS") == 1, 20, "bookie c writable again")


# ---- the Grafana dashboard ------------------------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, aggregations, labels and keywords left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings first: they may hold braces
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[m.end():].lstrip().startswith("(") or m.group() in _KEYWORDS:
            continue  # a function or aggregation, or an operator word
        names.add(m.group())
    return names


def dashboard_queries(doc) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets (rows included) and template variable queries."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc.get("panels", []))
    for variable in doc.get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if variable.get("type") == "query" and isinstance(query, str):
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
            found.append(m[1] if m else query)
    return found


@pytest.mark.parametrize("expr, names", [
    ('sum by (namespace) (pulsar_rate_in{cluster=~"$cluster"})', {"pulsar_rate_in"}),
    ("histogram_quantile(0.99, sum by (le, instance) (rate(bookie_x_bucket[$__rate_interval])))", {"bookie_x_bucket"}),
    ('a / (b + c{l="x{y}"}) > bool 0', {"a", "b", "c"}),
    ("topk(10, pulsar_msg_backlog) offset 5m", {"pulsar_msg_backlog"}),
    ("sum(x) without (instance) * on (cluster) group_left (ns) y", {"x", "y"}),
])
def test_promql_metric_names(expr, names):
    assert promql_metric_names(expr) == names


def test_every_metric_the_dashboard_uses_exists(standalone, client, topic):
    produce_and_consume(client, topic, 10)
    wait_until(lambda: value(broker_metrics(standalone), "pulsar_rate_in", topic=topic), 20, "the topic's rates")
    scraped = {name for name, _ in broker_metrics(standalone)}
    for _, url, _ in bookie_urls(standalone).values():
        scraped |= {name for name, _ in scrape(url)}
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    used = set().union(*map(promql_metric_names, queries))
    assert len(queries) > 30 and len(used) > 40
    assert sorted(used - scraped) == []


def test_docs_list_every_metric(standalone, client, topic):
    """docs/metrics.md names every family a broker and its bookies export (a new metric must be documented)."""
    produce_and_consume(client, topic, 3)
    page = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"\b(?:pulsar|bookie|magnetar)_[A-Za-z0-9_]*[A-Za-z0-9]", page))
    urls = [f"{standalone.web_url}/metrics", *(url for _, url, _ in bookie_urls(standalone).values())]
    families = set()
    for url in urls:
        with urllib.request.urlopen(url, timeout=15) as resp:
            families |= {(f.name, f.type) for f in text_string_to_metric_families(resp.read().decode())}
    missing = sorted(name for name, kind in families if not name.endswith("_created")
                     and name not in documented and f"{name}_total" not in documented)
    assert len(families) > 80 and missing == []


def test_the_startup_heap_is_frozen_out_of_garbage_collections(standalone, client, topic):
    """Full collections walk only what was made after the start: an ACK flood made one every few seconds, and
    walking the whole startup heap paused the event loop for 40-160 ms each time."""
    produce_and_consume(client, topic, 3)
    samples = broker_metrics(standalone)
    assert value(samples, "magnetar_gc_frozen_objects") > 10_000
    assert value(samples, "magnetar_gc_collections_total", generation="2") is not None


def test_bookie_http_ports_follow_the_base_and_0_picks_free_ones(tmp_path):
    from broker.standalone_layout import standalone_bookie_configs

    configs = standalone_bookie_configs(tmp_path, "memory://x", 3181, first_http_port=8000)
    assert [(c.port, c.http_port, c.network_location) for c in configs] == [
        (3181, 8000, "/zone-a/ud0"), (3182, 8001, "/zone-b/ud1"), (3183, 8002, "/zone-c/ud2")]
    assert [c.http_port for c in standalone_bookie_configs(tmp_path, "memory://x", 3181)] == [0, 0, 0]


def test_printed_bookie_ports_are_distinct_and_real(standalone):
    printed = bookie_urls(standalone)  # started with --bookie-http-port 0
    ports = {int(url.rsplit(":", 1)[1].removesuffix("/metrics")) for _, url, _ in printed.values()}
    assert len(printed) == 3 and len(ports) == 3 and 0 not in ports


def test_a_taken_bookie_http_port_refuses_the_start(tmp_path):
    import socket
    import subprocess

    from storage.testing.processes import VENV_BIN, free_port

    base = free_port_block(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))  # bookie b's
        taken.listen()
        result = subprocess.run(
            [str(VENV_BIN / "broker"), "standalone", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
             "--http-port", str(free_port()), "--stream-port", str(free_port()), "--bookie-port", str(free_port_block(3)),
             "--bookie-http-port", str(base)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "refusing to start" in result.stderr and str(base + 1) in result.stderr
    assert " ready (" not in result.stdout
