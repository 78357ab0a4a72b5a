"""100,000 acknowledgement holes survive a kill -9 of the broker exactly (Pulsar drops those past 10,000),
and so do 50,000 batch-index acknowledgements spread over 1,000 partly acknowledged batches.

Those sizes run in `make test-slow`; `make test` runs the same checks at 20,000 holes (twice Pulsar's 10,000,
twenty times the 1,000 ranges a metadata-store snapshot holds) and 7,500 batch-index acks over 1,500 batches
(past the snapshot's 1,000 batches too), so both still go through the cursor ledger alone.

How (at the slow size): 200,000 single-message entries (batching off, send_async with a window of 4,000 in
flight) on a subscription whose consumer is closed meanwhile, so nothing is dispatched while producing. A consumer then
acknowledges every other entry with ACK commands of 1,000 message ids each, every one carrying a request
id: the broker answers only once the acks are durable, so when the last answer is in, kill -9 can lose
nothing. After the restart the consumer must get exactly the 100,000 unacknowledged entries, then a
sentinel published after the restart: the subscription is Exclusive, so delivery is in log order and
anything acknowledged that came back would arrive before the sentinel.

The managed ledger is written with one replica (E1/Qw1/Qa1): replication has nothing to do with what is
tested, and it halves the time spent producing on a shared machine.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
import urllib.request

import pytest

from magnetar.asyncio.client import AsyncClient
from magnetar.asyncio.consumer import ConsumerType, _bitset
from magnetar.protocol import pulsar_api_pb2 as pb
from storage.testing.waiting import wait_until

ONE_REPLICA = {f"MAGNETAR_BROKER_MANAGED_LEDGER_{k}": "1" for k in ("ENSEMBLE_SIZE", "WRITE_QUORUM", "ACK_QUORUM")}
# These consumers acknowledge entries they were never sent (receiver queue 10): the broker paces such acks
# (10,000 ids/s per connection, tests/official_client/test_command_budget.py), which here would only add a minute.
ONE_REPLICA["MAGNETAR_BROKER_MAX_UNDISPATCHED_ACKS_PER_CONNECTION_PER_S"] = "0"
TOPIC = "persistent://public/default/ack-holes"
BATCH_TOPIC = "persistent://public/default/batch-ack-holes"


async def _produce(client, n: int, topic: str = TOPIC, **batching) -> list:
    producer = await client.create_producer(topic, max_pending_messages=5000, send_timeout_millis=120_000,
                                            **(batching or {"batching_enabled": False}))
    window, ids = collections.deque(), []
    for i in range(n):
        if len(window) >= 4000:
            ids.append(await window.popleft())
        window.append(producer.send_async(b"%d" % i))
    while window:
        ids.append(await window.popleft())
    await producer.close()
    return ids


async def _ack_durably(consumer, ids) -> None:
    """``ids``: MessageIds, or MessageIdData when they carry batch-index ack sets."""
    conn = consumer.conn
    requests = []
    for start in range(0, len(ids), 1000):
        body = pb.CommandAck(consumer_id=consumer.consumer_id, ack_type=pb.CommandAck.Individual,
                             request_id=conn.next_request_id(),
                             message_id=[m if isinstance(m, pb.MessageIdData) else
                                         pb.MessageIdData(ledgerId=m.ledger_id(), entryId=m.entry_id())
                                         for m in ids[start:start + 1000]])
        requests.append(conn.request(pb.BaseCommand.ACK, "ack", body))
    for response in await asyncio.gather(*requests):
        assert not response.HasField("error"), response.message


def _admin(broker, what: str) -> dict:
    name = TOPIC.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/admin/v2/persistent/{name}/{what}", timeout=30) as resp:
        return json.loads(resp.read())


def _backlog(broker) -> int:
    return _admin(broker, "stats")["subscriptions"]["holes"]["msgBacklog"]


async def _before_the_kill(broker, holes: int) -> tuple[list[bytes], list[bytes]]:
    client = AsyncClient(broker.service_url, operation_timeout_seconds=60)
    try:
        consumer = await client.subscribe(TOPIC, "holes", consumer_type=ConsumerType.Exclusive)
        await consumer.close()  # the subscription stays; nothing is dispatched while producing
        ids = await _produce(client, 2 * holes)
        consumer = await client.subscribe(TOPIC, "holes", consumer_type=ConsumerType.Exclusive, receiver_queue_size=10)
        acked = ids[1::2]  # the first entry stays unacked: every acked one is a separate range
        await _ack_durably(consumer, acked)
        return [b"%d" % i for i in range(1, 2 * holes, 2)], [b"%d" % i for i in range(0, 2 * holes, 2)]
    finally:
        await client.close()


async def _after_the_restart(broker, topic: str = TOPIC, subscription: str = "holes") -> list[bytes]:
    client = AsyncClient(broker.service_url, operation_timeout_seconds=60)
    try:
        consumer = await client.subscribe(topic, subscription, consumer_type=ConsumerType.Exclusive,
                                          receiver_queue_size=2000)
        producer = await client.create_producer(topic)
        await producer.send(b"sentinel")
        got: list[bytes] = []
        deadline = time.monotonic() + 120
        while not got or got[-1] != b"sentinel":
            assert time.monotonic() < deadline, f"only {len(got)} messages before the deadline"
            for entry in await consumer.receive_entries(2000, timeout_millis=30_000):
                got.extend(m.data() for m in entry.messages())
        return got[:-1]
    finally:
        await client.close()


@pytest.mark.parametrize("holes", [20_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_ack_holes_survive_kill9_exactly(start_standalone, holes):
    broker = start_standalone(env=ONE_REPLICA)
    acked, unacked = asyncio.run(_before_the_kill(broker, holes))
    assert _backlog(broker) == holes
    broker.kill9()
    broker.start(timeout_s=60)
    backlog = wait_until(lambda: _backlog(broker), 60, "the restored subscription to report its backlog")
    assert backlog == holes, f"after the restart the backlog is {backlog}"
    assert _admin(broker, "internalStats")["cursors"]["holes"]["totalNonContiguousDeletedMessagesRange"] == holes
    redelivered = asyncio.run(_after_the_restart(broker))
    assert len(redelivered) == len(set(redelivered)), "nothing is delivered twice"
    assert not set(redelivered) & set(acked), "no acknowledged message comes back"
    assert redelivered == unacked, "every unacknowledged message comes back, in order"


async def _batch_acks_before_the_kill(broker, messages: int, per_batch: int) -> list[bytes]:
    """``messages`` in batches of up to ``per_batch``; every even batch index acknowledged. Returns what is left."""
    client = AsyncClient(broker.service_url, operation_timeout_seconds=60)
    try:
        consumer = await client.subscribe(BATCH_TOPIC, "batches", consumer_type=ConsumerType.Exclusive)
        await consumer.close()
        ids = await _produce(client, messages, BATCH_TOPIC, batching_enabled=True, batching_max_messages=per_batch)
        entries: dict[tuple[int, int], int] = collections.Counter((m.ledger_id(), m.entry_id()) for m in ids)
        assert len(entries) <= 2 * messages // per_batch and all(m.batch_index() >= 0 for m in ids), "batched entries"
        acks = []
        for (ledger_id, entry_id), size in entries.items():
            odd = {i for i in range(size) if i % 2}  # the ack set names the messages still unacknowledged
            acks.append(pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id, ack_set=_bitset(odd, size),
                                         batch_size=size))
        consumer = await client.subscribe(BATCH_TOPIC, "batches", consumer_type=ConsumerType.Exclusive,
                                          receiver_queue_size=10)
        await _ack_durably(consumer, acks)
        return [b"%d" % i for i, m in enumerate(ids) if m.batch_index() % 2]
    finally:
        await client.close()


@pytest.mark.parametrize("messages,per_batch", [(15_000, 10), pytest.param(100_000, 100, marks=pytest.mark.slow)])
def test_batch_index_acks_survive_kill9_exactly(start_standalone, messages, per_batch):
    broker = start_standalone(env=ONE_REPLICA)
    unacked = asyncio.run(_batch_acks_before_the_kill(broker, messages, per_batch))
    assert len(unacked) >= 0.45 * messages  # full batches leave half; a batch cut short by the delay, about half
    broker.kill9()
    broker.start(timeout_s=60)
    redelivered = asyncio.run(_after_the_restart(broker, BATCH_TOPIC, "batches"))
    assert redelivered == unacked, "exactly the messages of each batch that were not acknowledged, in order"
