"""Broker suites: the official `pulsar-client` against a `broker standalone` process (3 bookies, E2/Qw2/Qa2, fsync on).

``produce``  100-byte messages with batching, closed loop with a deep send window: msg/s.
``latency``  a steady 1,000 msg/s open-loop schedule (no coordinated omission): publish latency
             is measured from each message's *scheduled* send time to its receipt.
``e2e``      the same schedule with a consumer attached: scheduled send time to receive.
``catchup``  a backlog written first, then one consumer drains it: msg/s.
``topics``   N idle topics loaded in one broker: resident memory of the standalone process.
Each run also measures the disk's own fdatasync rate in the same run, as the reference.
"""

from __future__ import annotations

import resource
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import cdf_ms, latency_summary_ms, print_table

MESSAGE_BYTES = 100
CALLBACK_EVERY = 100


class _Deployment:
    """`broker standalone`, or (cluster=True) ZooKeeper + 3 bookie processes in 3 zones + `broker start`.

    ``env``: the broker's MAGNETAR_BROKER_* settings (the standalone's; e.g. its bookies' journalSyncData)."""

    def __init__(self, root: Path, cluster: bool, env: dict[str, str] | None = None):
        from storage.testing.processes import BookieCluster, BrokerProcess
        from storage.testing.zookeeper import ZooKeeperServer

        self.zk = self.bookies = None
        if cluster:
            self.zk = ZooKeeperServer(root / "zk").__enter__()
            # As in standalone: sync when the journal queue empties rather than waiting out the group window.
            self.bookies = BookieCluster(self.zk.url("/bench"), root / "bookies",
                                         env={"MAGNETAR_BOOKIE_JOURNAL_FLUSH_WHEN_QUEUE_EMPTY": "true"}).start()
            self.broker = BrokerProcess(root / "broker", metadata_url=self.bookies.metadata_url)
        else:
            self.broker = BrokerProcess(root / "standalone" / "data", env=dict(env or {}))
        self.broker.start(timeout_s=90)

    def stop(self) -> None:
        self.broker.stop()
        if self.bookies is not None:
            self.bookies.stop()
            self.zk.__exit__(None, None, None)


def _process_cpu_s() -> float:
    """User + system CPU of this process, every thread: the official client's C++ threads and the loop that feeds
    it (the broker is another process)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client(url: str):
    import pulsar

    return pulsar.Client(url, operation_timeout_seconds=60, io_threads=2)


def produce(url: str, messages: int, body_bytes: int = MESSAGE_BYTES, window: int = 50_000,
            batch_messages: int = 1000) -> dict:
    """``window`` messages at most unconfirmed (max_pending_messages, the client blocking beyond it), batches of
    at most ``batch_messages`` (and the client's default 128 KiB)."""
    import pulsar

    client = _client(url)
    try:
        producer = client.create_producer(
            f"persistent://public/default/bench-produce-{time.time_ns()}", batching_enabled=True,
            batching_max_messages=batch_messages, batching_max_publish_delay_ms=5, max_pending_messages=window,
            block_if_queue_full=True, send_timeout_millis=0,
        )
        body = b"x" * body_bytes
        failures = []

        def callback(res, _msg_id):
            if res != pulsar.Result.Ok:
                failures.append(res)

        for _ in range(min(10_000, messages // 10)):  # warm-up: connections, topic load, first ledger
            producer.send_async(body, None)
        producer.flush()
        # A Python callback per message costs a GIL hand-off from the client's C++ thread and caps the
        # client near 30k msg/s; one in CALLBACK_EVERY carries a callback, flush() waits for all of them.
        cpu_before = _process_cpu_s()
        start = time.perf_counter()
        for i in range(messages):
            producer.send_async(body, callback if i % CALLBACK_EVERY == 0 else None)
        producer.flush()
        elapsed = time.perf_counter() - start
        client_cpu_s = _process_cpu_s() - cpu_before
        return {"messages": messages, "message_bytes": body_bytes, "msg_per_s": messages / elapsed,
                "mb_per_s": messages * body_bytes / elapsed / 1e6, "failures": len(failures),
                "client_cpu_s": client_cpu_s, "client_cpu_us_per_msg": client_cpu_s / messages * 1e6}
    finally:
        client.close()


def steady(url: str, rate_per_s: int, duration_s: float, with_consumer: bool) -> dict:
    """Open loop: message i is due at start + i/rate; latency counts from that moment, not from the send call."""
    import pulsar

    client = _client(url)
    topic = f"persistent://public/default/bench-steady-{time.time_ns()}"
    publish_lat: list[float] = []
    e2e_lat: list[float] = []
    count = int(rate_per_s * duration_s)
    try:
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000) if with_consumer else None
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          max_pending_messages=50_000, block_if_queue_full=True)
        received = threading.Event()
        got = [0]

        def consume():
            while got[0] < count:
                try:
                    msg = consumer.receive(timeout_millis=1000)
                except pulsar.Timeout:
                    continue
                e2e_lat.append(time.perf_counter() - float(msg.properties()["due"]))
                consumer.acknowledge(msg)
                got[0] += 1
            received.set()

        reader = threading.Thread(target=consume, daemon=True) if consumer else None
        if reader:
            reader.start()
        start = time.perf_counter() + 0.1
        for i in range(count):
            due = start + i / rate_per_s
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.001))  # pacing the schedule, not synchronisation
            producer.send_async(b"x" * MESSAGE_BYTES, lambda res, mid, d=due: publish_lat.append(time.perf_counter() - d),
                                properties={"due": repr(due)})
        producer.flush()
        if reader:
            received.wait(60)
        out = {"rate_per_s": rate_per_s, "messages": count,
               **{f"publish_{k}": v for k, v in latency_summary_ms(publish_lat).items() if k != "count"},
               "publish_cdf_ms": cdf_ms(publish_lat)}
        if with_consumer:
            out.update({f"e2e_{k}": v for k, v in latency_summary_ms(e2e_lat).items() if k != "count"})
            out["e2e_cdf_ms"] = cdf_ms(e2e_lat)
        return out
    finally:
        client.close()


def catchup(url: str, backlog: int) -> dict:
    import pulsar

    client = _client(url)
    topic = f"persistent://public/default/bench-catchup-{time.time_ns()}"
    try:
        client.subscribe(topic, "bench").close()  # the subscription exists before the backlog is written
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                          max_pending_messages=50_000, block_if_queue_full=True, send_timeout_millis=0)
        for _ in range(backlog):
            producer.send_async(b"x" * MESSAGE_BYTES, None)
        producer.flush()
        consumer = client.subscribe(topic, "bench", receiver_queue_size=10_000)
        start = time.perf_counter()
        for _ in range(backlog):
            msg = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge_cumulative(msg) if _ % 1000 == 999 else None
        elapsed = time.perf_counter() - start
        return {"backlog": backlog, "msg_per_s": backlog / elapsed}
    finally:
        client.close()


def _create_topic(url: str) -> None:
    """PUT one topic. A bundle split or unload while thousands of topics are created answers "look the topic up
    again" (ServiceNotReady): try again until the bundle is served, and a 409 then means an earlier try made it."""
    from storage.testing.waiting import wait_until

    tries = 0

    def created() -> bool:
        nonlocal tries
        tries += 1
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=60).read()
            return True
        except urllib.error.HTTPError as exc:
            if exc.code == 409 and tries > 1:
                return True
            if exc.code >= 500 and b"look the topic up again" in exc.read():
                return False
            raise

    wait_until(created, 60, f"{url} to be created", interval_s=0.2)


def idle_topics(broker, count: int) -> dict:
    rss_before = _rss_mb(broker.proc.pid)
    for i in range(count):
        _create_topic(f"{broker.web_url}/admin/v2/persistent/public/default/idle-{i}")
    rss_after = _rss_mb(broker.proc.pid)
    return {"topics": count, "rss_before_mb": rss_before, "rss_after_mb": rss_after,
            "mb_per_1000_topics": (rss_after - rss_before) / count * 1000}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(quick: bool = False, only: tuple[str, ...] = ("produce", "latency", "e2e", "catchup", "topics"),
        cluster: bool = False) -> dict:
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-broker-"))
    results: dict = {"disk_512b": fsync_bandwidth(root, 512, 1.0 if quick else 3.0)}
    deployment = _Deployment(root, cluster)
    broker = deployment.broker
    try:
        if "produce" in only:
            results["produce"] = produce(broker.service_url, 20_000 if quick else 500_000)
        if "latency" in only:
            results["latency"] = steady(broker.service_url, 1000, 2 if quick else 20, with_consumer=False)
        if "e2e" in only:
            results["e2e"] = steady(broker.service_url, 1000, 2 if quick else 20, with_consumer=True)
        if "catchup" in only:
            results["catchup"] = catchup(broker.service_url, 20_000 if quick else 1_000_000)
        if "topics" in only:
            results["topics"] = idle_topics(broker, 50 if quick else 10_000)
    finally:
        deployment.stop()
    results["config"] = {"ensemble": 2, "write_quorum": 2, "ack_quorum": 2, "bookies": 3, "fsync": True,
                         "deployment": "3 bookie processes + broker start (ZooKeeper)" if cluster else "broker standalone",
                         "message_bytes": MESSAGE_BYTES, "client": "pulsar-client (official)", "quick": quick}
    _print(results)
    return results


def _print(r: dict) -> None:
    disk = r["disk_512b"]
    rows = [{"measure": "disk fdatasync 512 B", "value": disk["fsyncs_per_s"], "unit": "fsyncs/s",
             "p50_ms": disk["fsync_p50_ms"], "p99_ms": disk["fsync_p99_ms"], "reference": "same disk, same run"}]
    if "produce" in r:
        p = r["produce"]
        rows.append({"measure": "produce 100 B, batching", "value": p["msg_per_s"], "unit": "msg/s",
                     "reference": f"target 100,000; {p['msg_per_s'] / disk['fsyncs_per_s']:.1f} msgs per disk fsync"})
    for key, label in (("latency", "publish at 1,000/s"), ("e2e", "end-to-end at 1,000/s")):
        if key in r:
            prefix = "publish" if key == "latency" else "e2e"
            rows.append({"measure": label, "value": r[key]["messages"], "unit": "messages",
                         "p50_ms": r[key][f"{prefix}_p50_ms"], "p99_ms": r[key][f"{prefix}_p99_ms"],
                         "p999_ms": r[key][f"{prefix}_p999_ms"], "max_ms": r[key][f"{prefix}_max_ms"],
                         "reference": "target p99 <= 10 ms" if key == "latency" else "target p99 <= 15 ms"})
    if "catchup" in r:
        rows.append({"measure": f"catch-up read of {r['catchup']['backlog']:,}", "value": r["catchup"]["msg_per_s"],
                     "unit": "msg/s", "reference": "target 100,000"})
    if "topics" in r:
        t = r["topics"]
        rows.append({"measure": f"{t['topics']:,} idle topics", "value": t["rss_after_mb"], "unit": "MB RSS",
                     "reference": f"target < 1024 MB; {t['mb_per_1000_topics']:.1f} MB per 1,000 topics"})
    print_table(f"{r['config']['deployment']}, official pulsar-client, E2/Qw2/Qa2, fsync on", rows,
                ["measure", "value", "unit", "p50_ms", "p99_ms", "p999_ms", "max_ms", "reference"])
