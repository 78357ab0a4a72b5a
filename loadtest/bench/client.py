"""`client` suite: the `magnetar` client beside the official `pulsar-client`, against one `broker standalone`, one run.

Both produce 100-byte messages with batching (≤ 1,000 messages / 5 ms per batch) and then drain them with a
consumer. magnetar runs through its asyncio API in this process's own event loop (uvloop); the official client
through its Python wrapper with one callback per 100 sends. The official client's figures are the reference.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from loadtest.bench.broker import _Deployment, produce as official_produce
from loadtest.bench.report import print_table

MESSAGE_BYTES = 100


async def _magnetar(url: str, messages: int, body_bytes: int = MESSAGE_BYTES) -> dict:
    from magnetar.asyncio import Client

    client = Client(url, operation_timeout_seconds=60)
    topic = f"persistent://public/default/bench-magnetar-{time.time_ns()}"
    try:
        consumer = await client.subscribe(topic, "bench", receiver_queue_size=10_000)
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                                batching_max_publish_delay_ms=5, max_pending_messages=messages + 1,
                                                send_timeout_millis=0)
        body = b"x" * body_bytes
        start = time.perf_counter()
        for i in range(messages):
            last = producer.send_async(body)
            if i % 5000 == 4999:
                await asyncio.sleep(0)  # let receipts and socket writes run while queueing
        await producer.flush()
        await last
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


def run(quick: bool = False) -> dict:
    import uvloop

    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-client-"))
    deployment = _Deployment(root, cluster=False)
    url = deployment.broker.service_url
    n = 20_000 if quick else 300_000
    try:
        official = official_produce(url, n)
        official["consume_msg_per_s"] = _official_consume(url, n)
        ours = uvloop.run(_magnetar(url, n))
    finally:
        deployment.stop()
    results = {
        "official": official, "magnetar": ours,
        "produce_ratio": ours["produce_msg_per_s"] / official["msg_per_s"],
        "consume_ratio": ours["consume_msg_per_s"] / official["consume_msg_per_s"],
        "config": {"message_bytes": MESSAGE_BYTES, "messages": n, "quick": quick, "deployment": "broker standalone"},
    }
    print_table("magnetar beside pulsar-client, broker standalone, E2/Qw2/Qa2, fsync on", [
        {"measure": "produce, 100 B, batching", "magnetar": ours["produce_msg_per_s"], "pulsar-client": official["msg_per_s"],
         "ratio": results["produce_ratio"], "target": ">= 100,000 msg/s and >= 0.5 x pulsar-client"},
        {"measure": "consume", "magnetar": ours["consume_msg_per_s"], "pulsar-client": official["consume_msg_per_s"],
         "ratio": results["consume_ratio"], "target": ">= 100,000 msg/s"},
    ], ["measure", "magnetar", "pulsar-client", "ratio", "target"])
    return results
