"""A topic whose managed ledger fences itself closes, so its consumers are served again (nemesis seed 1)."""

from __future__ import annotations

import asyncio

import pulsar

from broker.topics.names import parse_topic
from storage.managed_ledger.metadata import cursor_path
from storage.metadata import open_store
from storage.testing.waiting import wait_until
from tests.cluster.support import client as _client


async def _rewrite(url: str, path: str) -> None:
    """What a new owner restoring the cursor does: rewrite the node as read, which moves its version on."""
    store = await open_store(url)
    try:
        data, stat = await store.get(path)
        await store.set(path, data, stat.version)
    finally:
        await store.close()


def test_seed1_partition_broker_fenced_cursor_write_closes_the_topic_and_delivery_resumes(start_brokers):
    """Seed 1, partition-broker: a cursor write met BadVersion, the managed ledger fenced itself, and the Shared
    dispatcher retried reads on the closed cursor for as long as the broker ran; with no producer publishing,
    nothing closed the topic and the consumer got nothing more. The fence must close the topic, so the
    consumer looks it up again and the rest of the backlog is delivered."""
    (broker,) = start_brokers(1)
    topic = "persistent://public/default/fenced-cursor"
    client = _client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(f"{i}".encode())
        node = cursor_path(parse_topic(topic).managed_ledger_name, "s")
        asyncio.run(_rewrite(broker.metadata_url, node))
        got: set[int] = set()

        def received_all() -> bool:
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                return False
            got.add(int(msg.data()))
            consumer.acknowledge(msg)  # the first one moves the cursor to its first ledger: BadVersion
            return len(got) == 10

        wait_until(received_all, 60, lambda: f"all 10 messages after the fence; got {sorted(got)}")
    finally:
        client.close()
