"""Delayed delivery: ``deliver_at`` per subscription type, and held messages across a kill -9 of the broker.

Times are wall-clock milliseconds (``deliver_at`` is epoch ms); client and broker share the machine's clock.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pulsar
import pytest

from storage.testing.waiting import wait_until
from tests.official_client.support import TIMEOUTS, assert_nothing_more, receive_n

# How late a due message may arrive: the broker's timer plus a read, on a shared, busy 2-core machine.
LATE_MS = 3000


def now_ms() -> int:
    return int(time.time() * 1000)


def receive_timed(consumer, timeout_s: float = 20.0, skip: bytes | None = None):
    """The next message and the wall-clock ms at which receive() returned it.

    A message whose payload is ``skip`` is acknowledged and passed over: after a kill -9 the broker may
    deliver again a message whose ack it had applied but not yet made durable (acks are persisted
    asynchronously, as in Pulsar: at-least-once)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except TIMEOUTS:
            continue
        if skip is not None and msg.data() == skip:
            consumer.acknowledge(msg)
            continue
        return msg, now_ms()
    raise AssertionError(f"no message within {timeout_s} s")


def assert_nothing_more_but_a_repeat_of(consumer, skip: bytes) -> None:
    """Like assert_nothing_more, allowing one late repeat of ``skip`` (see receive_timed)."""
    try:
        msg = consumer.receive(timeout_millis=500)
    except TIMEOUTS:
        return
    assert msg.data() == skip, f"unexpected extra message {msg.data()!r} (id {msg.message_id()})"
    consumer.acknowledge(msg)
    assert_nothing_more(consumer)


@pytest.mark.parametrize("sub_type, delayed", [
    ("Shared", True), ("KeyShared", True), ("Exclusive", False), ("Failover", False),
])
def test_deliver_at_is_honoured_on_shared_subscriptions_only(any_client, api, topic, sub_type, delayed):
    consumer = any_client.subscribe(topic, "at", consumer_type=getattr(api.ConsumerType, sub_type))
    # A batching producer: both clients send a message with a deliver-at time outside any batch.
    producer = any_client.create_producer(topic, batching_enabled=True)
    deliver_at = now_ms() + 3000
    producer.send(b"later", deliver_at=deliver_at)
    producer.send(b"now")
    first, first_at = receive_timed(consumer)
    consumer.acknowledge(first)
    second, second_at = receive_timed(consumer)
    consumer.acknowledge(second)
    if delayed:
        assert (first.data(), second.data()) == (b"now", b"later")
        assert deliver_at <= second_at <= deliver_at + LATE_MS
    else:  # Pulsar delivers in order, at once, on Exclusive and Failover
        assert (first.data(), second.data()) == (b"later", b"now")
        assert second_at < deliver_at
    assert_nothing_more(consumer)


def _backlog(broker, topic, sub) -> int:
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/admin/v2/persistent/{name}/stats", timeout=10) as resp:
        return json.loads(resp.read())["subscriptions"][sub]["msgBacklog"]


def _held_then_killed(broker, client, topic, sub_type, delays_ms):
    """A consumer with delayed messages held by the broker (and one plain message delivered and acknowledged),
    then a kill -9 of the broker. Returns (consumer, {payload: deliver_at})."""
    consumer = client.subscribe(topic, "held", consumer_type=sub_type)
    producer = client.create_producer(topic, batching_enabled=False)
    base = now_ms()
    due = {f"later-{i}".encode(): base + delay for i, delay in enumerate(delays_ms)}
    for i, (payload, deliver_at) in enumerate(due.items()):
        producer.send(payload, deliver_at=deliver_at, partition_key=f"k{i % 3}")
    producer.send(b"now", partition_key="k0")
    assert [m.data() for m in receive_n(consumer, 1)] == [b"now"]
    wait_until(lambda: _backlog(broker, topic, "held") == len(due), 10, "the broker to apply the ack of 'now'")
    assert now_ms() < min(due.values()), "a delayed message was due before the broker was killed: test too slow"
    broker.kill9()
    return consumer, due


SHARED_TYPES = pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared],
                                       ids=["Shared", "KeyShared"])


@SHARED_TYPES
def test_held_messages_are_delivered_on_time_after_a_kill9(start_standalone, topic, sub_type):
    broker = start_standalone()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        # Due in reverse order of publication: the rebuilt tracker must order them by time, not position.
        consumer, due = _held_then_killed(broker, client, topic, sub_type, [8000 + 300 * i for i in range(6, 0, -1)])
        broker.start(timeout_s=60)  # same data dir and ports
        wait_until(consumer.is_connected, 20, "the consumer to resubscribe")
        assert now_ms() < min(due.values()) - 1000, "the restart took too long for this test to mean anything"
        arrivals = []
        for _ in due:
            msg, at = receive_timed(consumer, timeout_s=30, skip=b"now")
            consumer.acknowledge(msg)
            arrivals.append((msg.data(), at))
        assert sorted(p for p, _ in arrivals) == sorted(due)
        for payload, at in arrivals:
            assert due[payload] <= at <= due[payload] + LATE_MS, f"{payload!r} arrived {at - due[payload]} ms off"
        assert_nothing_more_but_a_repeat_of(consumer, b"now")
    finally:
        client.close()


@SHARED_TYPES
def test_a_message_that_fell_due_while_the_broker_was_down_comes_promptly(start_standalone, topic, sub_type):
    broker = start_standalone()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer, due = _held_then_killed(broker, client, topic, sub_type, [1500])
        wait_until(lambda: now_ms() > due[b"later-0"] + 500, 10, "the message to fall due while the broker is down")
        broker.start(timeout_s=60)
        wait_until(consumer.is_connected, 20, "the consumer to resubscribe")
        connected_at = now_ms()
        msg, at = receive_timed(consumer, timeout_s=30, skip=b"now")
        assert msg.data() == b"later-0"
        assert at - connected_at <= LATE_MS, f"delivered {at - connected_at} ms after the consumer came back"
        consumer.acknowledge(msg)
        assert_nothing_more_but_a_repeat_of(consumer, b"now")
    finally:
        client.close()
