"""`compaction` suite: compaction throughput and the compacted read rate, beside the topic's normal catch-up read.

One `broker standalone`. Each round fills a new topic (the official client, batching, 100-byte values over
a tenth as many keys as messages), then, on that topic and in this order:

- **catch-up read** (the reference): a reader from the earliest message without ``read_compacted`` reads the
  whole backlog -- what a client that wants the latest value per key must read without compaction;
- **compaction**: one run over REST (PUT, then GET until it ends); messages per second of the broker's own run
  time (``lastRun.seconds``) and of the wall time the client saw;
- **compacted read**: a reader with ``read_compacted`` from the earliest message reads the view (one message
  per key); its rate in messages/s, and the time to a complete table beside the catch-up's.

Rounds alternate nothing (each phase needs the previous one), so each figure is the median over rounds and
each ratio the median of the rounds' ratios.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from loadtest.bench.report import print_table

ROUNDS = 3
VALUE_BYTES = 100
# A view of a tenth of the topic: large enough that its read rate is a rate, not one round trip.
MESSAGES, QUICK_MESSAGES = 200_000, 20_000
KEYS, QUICK_KEYS = 20_000, 2_000


def _http(method: str, url: str):
    req = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
        return json.loads(body) if body else None


def _fill(client, topic: str, messages: int, keys: int) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      block_if_queue_full=True, max_pending_messages=50_000)
    value = b"v" * VALUE_BYTES
    for i in range(messages):
        producer.send_async(value, None, partition_key=f"key-{i % keys}")
    producer.flush()
    producer.close()


def _read_all(client, topic: str, compacted: bool, expected: int) -> tuple[int, float]:
    """(messages read, seconds) reading from the earliest message until ``expected`` arrived."""
    import pulsar

    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted,
                                  receiver_queue_size=5000)
    started, n = time.perf_counter(), 0
    try:
        while n < expected:
            reader.read_next(30_000)
            n += 1
        return n, time.perf_counter() - started
    finally:
        reader.close()


def _compact(broker, topic: str) -> tuple[dict, float]:
    path = f"{broker.web_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/compaction"
    started = time.perf_counter()
    _http("PUT", path)
    while True:
        status = _http("GET", path)
        if status["status"] != "RUNNING":
            break
        time.sleep(0.02)  # polling a REST status: the client-side wall time includes at most one interval
    wall = time.perf_counter() - started
    if status["status"] != "SUCCESS":
        raise RuntimeError(f"compaction of {topic} ended {status}")
    return status["lastRun"], wall


def run(quick: bool = False, rounds: int | None = None) -> dict:
    import pulsar

    from storage.testing.processes import BrokerProcess

    messages, keys = (QUICK_MESSAGES, QUICK_KEYS) if quick else (MESSAGES, KEYS)
    rounds = rounds or (1 if quick else ROUNDS)
    broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="magnetar-bench-compaction-")) / "data")
    broker.start(timeout_s=90)
    runs: list[dict] = []
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        try:
            for r in range(rounds):
                topic = f"persistent://public/default/bench-compaction-{r}-{int(time.time())}"
                _fill(client, topic, messages, keys)
                raw_n, raw_s = _read_all(client, topic, False, messages)
                last_run, wall = _compact(broker, topic)
                view_n, view_s = _read_all(client, topic, True, keys)
                runs.append({
                    "messages": messages, "keys": last_run["keys"], "compacted_entries": last_run["entriesWritten"],
                    "catchup_msg_per_s": raw_n / raw_s, "catchup_s": raw_s,
                    "compaction_msg_per_s": messages / last_run["seconds"], "compaction_s": last_run["seconds"],
                    "compaction_wall_s": wall,
                    "compacted_read_msg_per_s": view_n / view_s, "compacted_read_s": view_s,
                })
        finally:
            client.close()
    finally:
        broker.stop()

    def med(key):
        return statistics.median(x[key] for x in runs)

    results = {
        "catchup_msg_per_s": med("catchup_msg_per_s"),
        "compaction_msg_per_s": med("compaction_msg_per_s"),
        "compacted_read_msg_per_s": med("compacted_read_msg_per_s"),
        "compaction_to_catchup": statistics.median(x["compaction_msg_per_s"] / x["catchup_msg_per_s"] for x in runs),
        "compacted_read_to_catchup": statistics.median(
            x["compacted_read_msg_per_s"] / x["catchup_msg_per_s"] for x in runs),
        "table_time_speedup": statistics.median(x["catchup_s"] / x["compacted_read_s"] for x in runs),
        "runs": runs,
        "config": {"rounds": rounds, "messages": messages, "keys": keys, "value_bytes": VALUE_BYTES, "quick": quick,
                   "producer": "official client, batching (1,000 messages per batch)",
                   "reader": "official client reader, receiver queue 5,000, read_next per message",
                   "deployment": "broker standalone (embedded metadata store, 3 bookies in-process)"},
    }
    _print(results)
    return results


def _print(r: dict) -> None:
    rows = [
        {"measure": f"catch-up read of {r['config']['messages']:,} messages (reference)",
         "msg/s": r["catchup_msg_per_s"], "vs catch-up": 1.0},
        {"measure": "compaction run", "msg/s": r["compaction_msg_per_s"], "vs catch-up": r["compaction_to_catchup"]},
        {"measure": f"compacted read ({r['config']['keys']:,} keys)", "msg/s": r["compacted_read_msg_per_s"],
         "vs catch-up": r["compacted_read_to_catchup"]},
    ]
    print_table("compaction beside a catch-up read of the same topic, same run", rows, ["measure", "msg/s", "vs catch-up"])
    print(f"time to a complete table: {r['table_time_speedup']:.1f}x faster through the compacted view")
