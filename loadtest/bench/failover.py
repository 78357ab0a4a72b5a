"""`failover` suite: how long a topic is unavailable when its owner dies, and when its bundle is unloaded.

A real ZooKeeper, 3 bookie processes in 3 zones and 3 `broker start` processes. The headline row runs the
brokers with their defaults (a 30 s metadata session timeout); a second cluster runs them with a short session
timeout (MAGNETAR_BENCH_FAILOVER_SESSION_S, 3 s), what a user who tunes it gets. The session timeout each row
reports is the one ZooKeeper granted the brokers' sessions. Each trial produces to a fresh
topic through the official client, entering through a broker that does not own it, with one send in flight at
a time:

* **kill -9**: the owner is killed; the figure is the time from the kill to the first publish acknowledged
  afterwards (by the new owner). The killed broker is restarted before the next trial.
* **graceful unload**: the owner unloads the topic's bundle; the figure is the longest gap between two
  consecutive acknowledged publishes around the unload.

Reference: Apache Pulsar's default ZooKeeper session timeout is 30 s, so an ungraceful failover there waits
at least that long for the owner's ephemeral node to expire (users report 51-100 s reconnects after a broker
restart, apache/pulsar#9297).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from loadtest.bench.report import percentile, print_table
from storage.testing.waiting import wait_until

# The tuned row's metadata session timeout; the headline row keeps the broker's default.
TUNED_SESSION_TIMEOUT_S = float(os.environ.get("MAGNETAR_BENCH_FAILOVER_SESSION_S", "3"))
# Where brokers register (DESIGN.md's metadata layout); the nodes' owners are the brokers' sessions.
BROKERS_ROOT = "/loadbalance/brokers"


def _lookup(broker, topic: str) -> str:
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/lookup/v2/topic/persistent/{name}", timeout=30) as resp:
        return json.loads(resp.read())["brokerUrl"]


class _Producer:
    """Sends one message at a time and records when each was acknowledged, and into which ledger."""

    def __init__(self, client, topic: str):
        self.producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        self.acks: list[float] = []
        self.ledgers: list[int] = []  # a new owner writes a new ledger: this tells whose receipt an ack is
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import pulsar

        while not self.stop.is_set():
            try:
                ledger = self.producer.send(b"x" * 100).ledger_id()
                self.ledgers.append(ledger)
                self.acks.append(time.monotonic())
            except pulsar.PulsarException:
                continue

    def wait_for(self, count: int, timeout_s: float) -> None:
        wait_until(lambda: len(self.acks) >= count, timeout_s, f"{count} acknowledged publishes", interval_s=0.005)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def _granted_session_s(zk, metadata_url: str) -> float:
    """The metadata session timeout the brokers run with, as ZooKeeper granted it to their sessions."""
    from storage.metadata import open_store

    async def broker_sessions() -> set[int]:
        store = await open_store(metadata_url)
        try:
            return {(await store.exists(f"{BROKERS_ROOT}/{b}")).ephemeral_owner for b in await store.children(BROKERS_ROOT)}
        finally:
            await store.close()

    granted = zk.granted_session_timeouts_ms()
    timeouts = {granted.get(s) for s in asyncio.run(broker_sessions())}
    if len(timeouts) != 1 or None in timeouts:
        raise RuntimeError(f"brokers' sessions not found or not alike in ZooKeeper's `cons`: {timeouts}")
    return timeouts.pop() / 1000


def _trials(zk, root: Path, trials: int, env: dict[str, str]) -> tuple[float, list[float], list[float]]:
    """(granted session timeout, kill -9 -> first ack, graceful unload -> longest publish gap) of ``trials``
    trials each, in seconds."""
    import pulsar

    from storage.testing.processes import BookieCluster, BrokerProcess

    kill_s: list[float] = []
    unload_gap_s: list[float] = []
    with BookieCluster(zk.url(f"/bench-{time.time_ns()}"), root / "bookies") as bookies:
        brokers = [BrokerProcess(root / f"broker-{i}", metadata_url=bookies.metadata_url, env=dict(env)) for i in range(3)]
        for b in brokers:
            b.spawn()
        for b in brokers:
            b.wait_healthy(60)
        try:
            session_s = _granted_session_s(zk, bookies.metadata_url)
            for trial in range(trials):
                for kind in ("kill", "unload"):
                    topic = f"persistent://public/default/failover-{kind}-{trial}-{time.time_ns()}"
                    owner_url = _lookup(brokers[0], topic)
                    owner = next(b for b in brokers if b.service_url == owner_url)
                    entry = next(b for b in brokers if b is not owner)
                    client = pulsar.Client(entry.service_url, operation_timeout_seconds=60,
                                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
                    producer = _Producer(client, topic)
                    try:
                        producer.wait_for(50, 60)
                        before = len(producer.acks)
                        if kind == "kill":
                            old_ledger = producer.ledgers[before - 1]
                            t0 = time.monotonic()
                            owner.kill9()
                            producer.wait_for(before + 10, 120)
                            # The first receipt from the new owner: a receipt the old owner sent just before it
                            # died can arrive after the kill, but it names the old ledger.
                            kill_s.append(next(a for a, ledger in zip(producer.acks[before:], producer.ledgers[before:])
                                               if a > t0 and ledger != old_ledger) - t0)
                        else:
                            name = "/".join(topic.split("/")[-3:-1])
                            with urllib.request.urlopen(f"{owner.web_url}/admin/v2/namespaces/{name}/bundles", timeout=10) as r:
                                bundles = json.loads(r.read())["owned"]
                            t0 = time.monotonic()
                            for bundle in bundles:
                                req = urllib.request.Request(f"{owner.web_url}/admin/v2/namespaces/{name}/{bundle}/unload", method="PUT")
                                urllib.request.urlopen(req, timeout=60).read()
                            producer.wait_for(before + 50, 60)
                            window = [a for a in producer.acks if a >= t0 - 1]
                            unload_gap_s.append(max(b - a for a, b in zip(window, window[1:])))
                    finally:
                        producer.close()
                        client.close()
                    if not owner.alive:
                        owner.start(60)
        finally:
            for b in brokers:
                b.stop()
    return session_s, kill_s, unload_gap_s


def _figures(session_timeout_s: float, kill_s: list[float], unload_gap_s: list[float]) -> dict:
    return {
        "session_timeout_s": session_timeout_s,
        "kill9_to_first_ack_s": {"p50": percentile(kill_s, 50), "max": max(kill_s), "all": kill_s},
        "unload_publish_gap_s": {"p50": percentile(unload_gap_s, 50), "p99": percentile(unload_gap_s, 99),
                                 "max": max(unload_gap_s), "all": unload_gap_s},
    }


def run(quick: bool = False) -> dict:
    from storage.testing.zookeeper import ZooKeeperServer

    trials = 2 if quick else 10
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-failover-"))
    with ZooKeeperServer(root / "zk") as zk:
        defaults = _figures(*_trials(zk, root / "defaults", trials, {}))
        tuned = _figures(*_trials(
            zk, root / "tuned", trials, {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": str(TUNED_SESSION_TIMEOUT_S)}))
    default_session_s = defaults["session_timeout_s"]
    results = {"trials": trials, **defaults, "tuned_session": tuned,
               "reference": "Apache Pulsar default zooKeeperSessionTimeoutMillis = 30,000 ms"}
    rows = []
    for label, r in ((f"broker defaults (session {default_session_s:g} s)", defaults),
                     (f"session timeout {TUNED_SESSION_TIMEOUT_S:g} s", tuned)):
        rows += [
            {"measure": f"kill -9 of the owner -> first ack, {label}", "p50_s": r["kill9_to_first_ack_s"]["p50"],
             "max_s": r["kill9_to_first_ack_s"]["max"], "target": "<= 5 s", "reference": "Pulsar: >= 30 s session timeout"},
            {"measure": f"graceful bundle unload: publish gap, {label}", "p50_s": r["unload_publish_gap_s"]["p50"],
             "max_s": r["unload_publish_gap_s"]["max"], "target": "p99 <= 1 s", "reference": ""},
        ]
    print_table(f"failover: 3 brokers, 3 bookies, {trials} trials", rows,
                ["measure", "p50_s", "max_s", "target", "reference"])
    return results
