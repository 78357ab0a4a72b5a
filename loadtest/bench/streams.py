"""`streams` suite: the Stream API (gRPC) beside the same work through the Pulsar protocol, one run, one broker.

One `broker standalone` (3 bookies, E2/Qw2/Qa2, fsync on) serves both. 100-byte records:

* **append throughput, one record per entry**: the asyncio `magnetar.streams` writer with up to ``WINDOW``
  appends in flight, beside the official `pulsar-client` producer with batching off and the same window
  (``send_async`` + ``flush``). One entry per record on both sides: the cost of the transport.
* **append throughput, batched**: ``append_batch`` of ``BATCH`` records (one entry each) beside the
  producer batching ``BATCH`` messages per entry: how batching recovers what gRPC costs per call.
* **append latency**: one append at a time (p50/p99) beside a synchronous ``send``.
* **tail latency**: from the start of an append to a tailing reader's receipt of it (one at a time) beside
  ``send`` to a consumer's ``receive`` of the same message.

Each figure is a median over ``ROUNDS`` rounds, and each ratio (stream / Pulsar) the median of the rounds'
ratios, so both sides of a ratio share the machine's noise.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from loadtest.bench.report import latency_summary_ms, print_table

RECORD_BYTES = 100
WINDOW = 1000
BATCH = 100
ROUNDS = 3


def _sizes(quick: bool) -> dict:
    return {"records": 2_000 if quick else 20_000, "batched_records": 10_000 if quick else 200_000,
            "latency_samples": 50 if quick else 500, "rounds": 1 if quick else ROUNDS}


# ---- the Stream API ------------------------------------------------------------------------------

async def _stream_round(address: str, sizes: dict, tag: str) -> dict:
    from magnetar.streams import LATEST, StreamClient

    body = b"x" * RECORD_BYTES
    async with StreamClient(address, timeout_s=60) as client:
        ns = f"public/bench-{tag}"
        await client.create_namespace(ns)
        out = {}
        for mode, count, per_append in (("single", sizes["records"], 1),
                                        ("batched", sizes["batched_records"], BATCH)):
            await client.create_stream(ns, mode)
            writer = await client.open_writer(ns, mode)
            await writer.append(body)  # the ledger and the write stream are up before the clock starts
            slots = asyncio.Semaphore(max(1, WINDOW // per_append))

            async def one() -> None:
                try:
                    if per_append == 1:
                        await writer.append(body)
                    else:
                        await writer.append_batch([body] * per_append)
                finally:
                    slots.release()

            start = time.perf_counter()
            tasks = []
            for _ in range(count // per_append):
                await slots.acquire()
                tasks.append(asyncio.ensure_future(one()))
            await asyncio.gather(*tasks)
            out[f"{mode}_records_per_s"] = count / (time.perf_counter() - start)
            await writer.close()

        await client.create_stream(ns, "latency")
        writer = await client.open_writer(ns, "latency")
        reader = await client.open_reader(ns, "latency", LATEST).open()
        pending = asyncio.ensure_future(reader.read_batch())
        await writer.append(body)
        await pending
        appends, tails = [], []
        for _ in range(sizes["latency_samples"]):
            pending = asyncio.ensure_future(reader.read_batch())
            started = time.perf_counter()
            await writer.append(body)
            appends.append(time.perf_counter() - started)
            await pending
            tails.append(time.perf_counter() - started)
        await reader.close()
        await writer.close()
        out["append"] = latency_summary_ms(appends)
        out["tail"] = latency_summary_ms(tails)
        return out


# ---- the Pulsar protocol (the official client) --------------------------------------------------------

def _pulsar_round(url: str, sizes: dict, tag: str) -> dict:
    import pulsar

    body = b"x" * RECORD_BYTES
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    out = {}
    try:
        for mode, count, options in (
                ("single", sizes["records"], {"batching_enabled": False}),
                ("batched", sizes["batched_records"], {"batching_enabled": True, "batching_max_messages": BATCH,
                                                       "batching_max_publish_delay_ms": 5})):
            producer = client.create_producer(f"persistent://public/default/bench-streams-{tag}-{mode}",
                                              max_pending_messages=WINDOW, block_if_queue_full=True,
                                              send_timeout_millis=0, **options)
            producer.send(body)
            start = time.perf_counter()
            for _ in range(count):
                producer.send_async(body, None)
            producer.flush()
            out[f"{mode}_records_per_s"] = count / (time.perf_counter() - start)
            producer.close()

        topic = f"persistent://public/default/bench-streams-{tag}-latency"
        consumer = client.subscribe(topic, "tail")
        producer = client.create_producer(topic, batching_enabled=False)
        appends, tails = [], []
        for _ in range(sizes["latency_samples"]):
            started = time.perf_counter()
            producer.send(body)
            appends.append(time.perf_counter() - started)
            message = consumer.receive(30_000)
            consumer.acknowledge(message)
            tails.append(time.perf_counter() - started)
        out["append"] = latency_summary_ms(appends)
        out["tail"] = latency_summary_ms(tails)
    finally:
        client.close()
    return out


def run(quick: bool = False) -> dict:
    from storage.testing.processes import BrokerProcess

    sizes = _sizes(quick)
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as root:
        broker = BrokerProcess(Path(root) / "standalone" / "data")
        broker.start(timeout_s=90)
        try:
            rounds = []
            for i in range(sizes["rounds"]):
                tag = f"{i}-{time.time_ns()}"
                stream = asyncio.run(_stream_round(broker.stream_address, sizes, tag))
                pulsar_side = _pulsar_round(broker.service_url, sizes, tag)
                rounds.append((stream, pulsar_side))
        finally:
            broker.stop()

    def median(side: int, *path: str) -> float:
        values = []
        for r in rounds:
            v = r[side]
            for p in path:
                v = v[p]
            values.append(v)
        return statistics.median(values)

    def ratio(*path: str) -> float:
        values = []
        for stream, pulsar_side in rounds:
            a, b = stream, pulsar_side
            for p in path:
                a, b = a[p], b[p]
            values.append(a / b)
        return statistics.median(values)

    results = {"config": {**sizes, "record_bytes": RECORD_BYTES, "window": WINDOW, "batch": BATCH,
                          "deployment": "broker standalone, E2/Qw2/Qa2, fsync on", "quick": quick},
               "stream": {}, "pulsar": {}, "ratio": {}}
    for side, key in ((0, "stream"), (1, "pulsar")):
        for field in ("single_records_per_s", "batched_records_per_s"):
            results[key][field] = median(side, field)
        for kind in ("append", "tail"):
            results[key][f"{kind}_p50_ms"] = median(side, kind, "p50_ms")
            results[key][f"{kind}_p99_ms"] = median(side, kind, "p99_ms")
    for field in ("single_records_per_s", "batched_records_per_s"):
        results["ratio"][field] = ratio(field)
    for kind in ("append", "tail"):
        results["ratio"][f"{kind}_p50_ms"] = ratio(kind, "p50_ms")
    rows = [{"figure": name, "stream (gRPC)": results["stream"][field], "pulsar protocol": results["pulsar"][field],
             "stream / pulsar": results["ratio"].get(field, results["stream"][field] / results["pulsar"][field])}
            for name, field in (("append records/s, 1 per entry", "single_records_per_s"),
                                (f"append records/s, {BATCH} per entry", "batched_records_per_s"),
                                ("append p50 ms (one at a time)", "append_p50_ms"),
                                ("append p99 ms", "append_p99_ms"),
                                ("tail p50 ms (append -> reader)", "tail_p50_ms"),
                                ("tail p99 ms", "tail_p99_ms"))]
    print_table(f"Stream API (gRPC) beside the Pulsar protocol, broker standalone, {RECORD_BYTES}-byte records, "
                f"median of {sizes['rounds']} round(s)", rows, ["figure", "stream (gRPC)", "pulsar protocol",
                                                              "stream / pulsar"])
    return results
