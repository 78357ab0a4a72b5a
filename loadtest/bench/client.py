"""`client` suite: the `magnetar` client beside the official `pulsar-client`, against one `broker standalone`, one run.

Produce: 100-byte messages with batching (≤ 1,000 messages / 5 ms per batch), ``max_pending_messages=50,000``,
no callback per message, the producer waiting for room when full (``block_if_queue_full``), then ``flush()``.
Three producers, each on its own topic: the official client, magnetar's sync API (``magnetar.Client``, the
drop-in for ``import pulsar``) and magnetar's asyncio API (in this process's own uvloop). The rate counts what
the broker stored (the topic's ``msgInCounter`` over admin REST) over the time from the first send to the
return of ``flush()``. The three run in turn, ``ROUNDS`` times; each figure is a median over rounds and each
ratio the median of the rounds' ratios (a round's producers run minutes apart at most, so they share the
machine's noise). Consume: a consumer of each client drains a batched backlog; the official client's is the
reference.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from loadtest.bench.broker import _Deployment
from loadtest.bench.report import print_table

MESSAGE_BYTES = 100
ROUNDS = 3
WARM_UP = 10_000  # per producer: connection, topic load and first ledger before the clock starts
PRODUCER_OPTIONS = {"batching_enabled": True, "batching_max_messages": 1000, "batching_max_publish_delay_ms": 5,
                    "max_pending_messages": 50_000, "block_if_queue_full": True, "send_timeout_millis": 0}
PRODUCERS = ("official", "magnetar_sync", "magnetar_asyncio")


def _stored(web_url: str, topic: str) -> int:
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{web_url}/admin/v2/persistent/{name}/stats", timeout=30) as resp:
        return json.loads(resp.read())["msgInCounter"]


def _rate(web_url: str, topic: str, before: int, elapsed_s: float, messages: int) -> dict:
    stored = _stored(web_url, topic) - before
    if stored != messages:
        raise RuntimeError(f"the broker stored {stored} of {messages} messages on {topic}")
    return {"messages": stored, "seconds": elapsed_s, "msg_per_s": stored / elapsed_s}


def _produce_sync(module, url: str, web_url: str, messages: int, body_bytes: int = MESSAGE_BYTES,
                  **client_options) -> dict:
    """The same code for `pulsar` and `magnetar`: it is what a user of the official client writes."""
    client = module.Client(url, operation_timeout_seconds=60, **client_options)
    topic = f"persistent://public/default/bench-produce-{module.__name__}-{time.time_ns()}"
    try:
        producer = client.create_producer(topic, **PRODUCER_OPTIONS)
        body = b"x" * body_bytes
        for _ in range(min(WARM_UP, messages)):
            producer.send_async(body, None)
        producer.flush()
        before = _stored(web_url, topic)
        start = time.perf_counter()
        for _ in range(messages):
            producer.send_async(body, None)
        producer.flush()
        elapsed = time.perf_counter() - start
        return _rate(web_url, topic, before, elapsed, messages)
    finally:
        client.close()


async def _produce_asyncio(url: str, web_url: str, messages: int) -> dict:
    from magnetar.asyncio import Client
    from magnetar.errors import ProducerQueueIsFull

    client = Client(url, operation_timeout_seconds=60)
    topic = f"persistent://public/default/bench-produce-asyncio-{time.time_ns()}"
    try:
        producer = await client.create_producer(topic, **PRODUCER_OPTIONS)
        body = b"x" * MESSAGE_BYTES

        async def send_all(n: int) -> None:
            for _ in range(n):
                try:
                    producer.send_async(body)
                except ProducerQueueIsFull:  # the asyncio spelling of block_if_queue_full
                    await producer.wait_for_room()
                    producer.send_async(body)
            await producer.flush()

        await send_all(min(WARM_UP, messages))
        before = await asyncio.to_thread(_stored, web_url, topic)
        start = time.perf_counter()
        await send_all(messages)
        elapsed = time.perf_counter() - start
        return await asyncio.to_thread(_rate, web_url, topic, before, elapsed, messages)
    finally:
        await client.close()


def produce_rounds(url: str, web_url: str, messages: int, rounds: int) -> dict:
    import pulsar
    import uvloop

    import magnetar

    quiet = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)}
    runs: dict[str, list[dict]] = {name: [] for name in PRODUCERS}
    for _ in range(rounds):
        runs["official"].append(_produce_sync(pulsar, url, web_url, messages, **quiet))
        runs["magnetar_sync"].append(_produce_sync(magnetar, url, web_url, messages))
        runs["magnetar_asyncio"].append(uvloop.run(_produce_asyncio(url, web_url, messages)))
    out: dict = {name: {"msg_per_s": statistics.median(r["msg_per_s"] for r in rs),
                        "runs_msg_per_s": [r["msg_per_s"] for r in rs]} for name, rs in runs.items()}
    for name in ("magnetar_sync", "magnetar_asyncio"):
        ratios = [ours["msg_per_s"] / ref["msg_per_s"] for ours, ref in zip(runs[name], runs["official"])]
        out[f"{name}_ratio"] = statistics.median(ratios)
        out[f"{name}_runs_ratio"] = ratios
    out["config"] = {"messages": messages, "rounds": rounds, "message_bytes": MESSAGE_BYTES, **PRODUCER_OPTIONS}
    return out


async def magnetar_produce_consume(url: str, messages: int, body_bytes: int = MESSAGE_BYTES,
                                   window: int | None = None, batch_messages: int = 1000) -> dict:
    """Produce ``messages`` of ``body_bytes`` with the asyncio client (batching), then consume them all
    (acknowledging cumulatively); both rates. The client suite's consume figure and the peers suite use it.
    ``window``: at most this many messages unconfirmed (None: all of them may be queued at once)."""
    from magnetar.asyncio import Client

    client = Client(url, operation_timeout_seconds=60)
    topic = f"persistent://public/default/bench-magnetar-{time.time_ns()}"
    try:
        consumer = await client.subscribe(topic, "bench", receiver_queue_size=10_000)
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=batch_messages,
                                                batching_max_publish_delay_ms=5,
                                                max_pending_messages=window or messages + 1, send_timeout_millis=0)
        body = b"x" * body_bytes
        start = time.perf_counter()
        for i in range(messages):
            if window is not None:
                await producer.wait_for_room()
            producer.send_async(body)
            if i % 5000 == 4999:
                await asyncio.sleep(0)  # let receipts and socket writes run while queueing
        await producer.flush()
        produced = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(messages):
            msg = await consumer.receive(30_000)
            if i % 1000 == 999:
                await consumer.acknowledge_cumulative(msg)
        consumed = time.perf_counter() - start
        return {"messages": messages, "message_bytes": body_bytes, "produce_msg_per_s": messages / produced,
                "produce_mb_per_s": messages * body_bytes / produced / 1e6, "consume_msg_per_s": messages / consumed}
    finally:
        await client.close()


def _official_consume(url: str, messages: int) -> float:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    topic = f"persistent://public/default/bench-official-consume-{time.time_ns()}"
    try:
        consumer = client.subscribe(topic, "bench", receiver_queue_size=10_000)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                          max_pending_messages=50_000, block_if_queue_full=True)
        for _ in range(messages):
            producer.send_async(b"x" * MESSAGE_BYTES, None)
        producer.flush()
        start = time.perf_counter()
        for i in range(messages):
            msg = consumer.receive(30_000)
            if i % 1000 == 999:
                consumer.acknowledge_cumulative(msg)
        return messages / (time.perf_counter() - start)
    finally:
        client.close()


def run(quick: bool = False, rounds: int | None = None) -> dict:
    import uvloop

    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-client-"))
    deployment = _Deployment(root, cluster=False)
    url, web_url = deployment.broker.service_url, deployment.broker.web_url
    produce_n, consume_n = (20_000, 20_000) if quick else (200_000, 300_000)
    try:
        produce = produce_rounds(url, web_url, produce_n, rounds or (1 if quick else ROUNDS))
        official_consume = _official_consume(url, consume_n)
        ours_consume = uvloop.run(magnetar_produce_consume(url, consume_n))["consume_msg_per_s"]
    finally:
        deployment.stop()
    official, sync, aio = (produce[name]["msg_per_s"] for name in PRODUCERS)
    results = {
        "produce": produce,
        "official": {"msg_per_s": official, "consume_msg_per_s": official_consume},
        "magnetar": {"produce_msg_per_s": aio, "sync_produce_msg_per_s": sync, "consume_msg_per_s": ours_consume,
                     "message_bytes": MESSAGE_BYTES},
        "produce_ratio": produce["magnetar_asyncio_ratio"],
        "sync_produce_ratio": produce["magnetar_sync_ratio"],
        "consume_ratio": ours_consume / official_consume,
        "config": {"message_bytes": MESSAGE_BYTES, "messages": produce_n, "consume_messages": consume_n,
                   "rounds": produce["config"]["rounds"], "quick": quick, "deployment": "broker standalone"},
    }
    rounds = produce["config"]["rounds"]
    print_table(f"magnetar beside pulsar-client, broker standalone, E2/Qw2/Qa2, fsync on (produce: median of {rounds})", [
        {"measure": "produce 100 B, sync API (magnetar.Client)", "magnetar": sync, "pulsar-client": official,
         "ratio": results["sync_produce_ratio"], "target": ">= 0.5 x pulsar-client"},
        {"measure": "produce 100 B, asyncio API", "magnetar": aio, "pulsar-client": official,
         "ratio": results["produce_ratio"], "target": ">= 100,000 msg/s and >= 0.5 x pulsar-client"},
        {"measure": "consume", "magnetar": ours_consume, "pulsar-client": official_consume,
         "ratio": results["consume_ratio"], "target": ">= 100,000 msg/s"},
    ], ["measure", "magnetar", "pulsar-client", "ratio", "target"])
    return results
