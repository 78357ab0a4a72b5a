"""Delayed delivery: ``deliver_at`` per subscription type, and held messages across a kill -9 of the broker.

Times are wall-clock milliseconds (``deliver_at`` is epoch ms); client and broker share the machine's clock.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pulsar
import pytest

from tests.harness.processes import wait_until
from tests.official_client.support import TIMEOUTS, assert_nothing_more, receive_n

# How late a due message may arrive: the broker's timer plus a read, on a shared, busy 2-core machine.
LATE_MS = 3000


def now_ms() -> int:
    return int(time.time() * 1000)


def receive_timed(consumer, timeout_s: float = 20.0):
    """The next message and the wall-clock ms at which receive() returned it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except TIMEOUTS:
            continue
        return msg, now_ms()
    raise AssertionError(f"no message within {timeout_s} s")


@pytest.mark.parametrize("sub_type, delayed", [
    ("Shared", True), ("KeyShared", True), ("Exclusive", False), ("Failover", False),
])
def test_deliver_at_is_honoured_on_shared_subscriptions_only(any_client, api, topic, sub_type, delayed):
    consumer = any_client.subscribe(topic, "at", consumer_type=getattr(api.ConsumerType, sub_type))
    producer = any_client.create_producer(topic, batching_enabled=False)
    deliver_at = now_ms() + 2000
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


def _held_then_killed(broker, client, topic, delay_ms):
    """A Shared consumer with one delayed message held by the broker (and one plain message delivered and
    acknowledged), then a kill -9 of the broker. Returns (consumer, deliver_at)."""
    consumer = client.subscribe(topic, "held", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    deliver_at = now_ms() + delay_ms
    producer.send(b"later", deliver_at=deliver_at)
    producer.send(b"now")
    assert [m.data() for m in receive_n(consumer, 1)] == [b"now"]
    wait_until(lambda: _backlog(broker, topic, "held") == 1, 10, "the broker to apply the ack of 'now'")
    assert now_ms() < deliver_at, "the delayed message was due before the broker was killed: test too slow"
    broker.kill9()
    return consumer, deliver_at


def test_a_held_message_is_delivered_on_time_after_a_kill9(start_standalone, topic):
    broker = start_standalone()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer, deliver_at = _held_then_killed(broker, client, topic, delay_ms=8000)
        broker.start(timeout_s=60)  # same data dir and ports
        wait_until(consumer.is_connected, 20, "the consumer to resubscribe")
        assert now_ms() < deliver_at - 1000, "the restart took too long for this test to mean anything"
        msg, at = receive_timed(consumer, timeout_s=30)
        assert msg.data() == b"later"
        assert deliver_at <= at <= deliver_at + LATE_MS, f"delivered {at - deliver_at} ms after its time"
        consumer.acknowledge(msg)
        assert_nothing_more(consumer)
    finally:
        client.close()


def test_a_message_that_fell_due_while_the_broker_was_down_comes_promptly(start_standalone, topic):
    broker = start_standalone()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer, deliver_at = _held_then_killed(broker, client, topic, delay_ms=1500)
        wait_until(lambda: now_ms() > deliver_at + 500, 10, "the message to fall due while the broker is down")
        broker.start(timeout_s=60)
        wait_until(consumer.is_connected, 20, "the consumer to resubscribe")
        connected_at = now_ms()
        msg, at = receive_timed(consumer, timeout_s=30)
        assert msg.data() == b"later"
        assert at - connected_at <= LATE_MS, f"delivered {at - connected_at} ms after the consumer came back"
        consumer.acknowledge(msg)
        assert_nothing_more(consumer)
    finally:
        client.close()
