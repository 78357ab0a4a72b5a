"""Negative acks, ack timeouts, redelivery counts, dead-letter topics and delayed delivery."""

from __future__ import annotations

import time
from datetime import timedelta

import pulsar  # noqa: F401 (one of the two clients these tests drive)
import pytest

from tests.official_client.support import TIMEOUTS, assert_nothing_more, payloads, receive_n



@pytest.fixture
def client(any_client):
    """Every test here runs with the official client and with magnetar (tests/fixtures/broker.py)."""
    return any_client


def test_negative_ack_redelivers_with_a_growing_redelivery_count(client, topic, api):
    consumer = client.subscribe(topic, "nack", consumer_type=api.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"retry me")
    counts = []
    for _ in range(3):
        msg = receive_n(consumer, 1, ack=False)[0]
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    msg = receive_n(consumer, 1)[0]
    counts.append(msg.redelivery_count())
    assert counts == [0, 1, 2, 3]
    assert msg.data() == b"retry me"


def test_ack_timeout_redelivers_unacked_messages(client, topic, api):
    consumer = client.subscribe(topic, "ackto", consumer_type=api.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)
    producer = client.create_producer(topic)
    producer.send(b"a")
    producer.send(b"b")
    first = receive_n(consumer, 2, ack=False)
    consumer.acknowledge(first[0])
    again = receive_n(consumer, 1, timeout_s=30)[0]
    assert again.data() == first[1].data() and again.redelivery_count() >= 1


def test_dead_letter_topic_after_max_redeliveries(client, topic, api):
    dlq = topic + "-DLQ"
    dlq_consumer = client.subscribe(dlq, "dlq-watch", initial_position=api.InitialPosition.Earliest)
    consumer = client.subscribe(
        topic, "dl", consumer_type=api.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=api.ConsumerDeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq),
    )
    producer = client.create_producer(topic)
    producer.send(b"poison")
    producer.send(b"fine")
    deadline = time.monotonic() + 20
    fine_seen = False
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except TIMEOUTS:
            if fine_seen:
                break
            continue
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            fine_seen = True
        else:
            consumer.negative_acknowledge(msg)
    dead = receive_n(dlq_consumer, 1, timeout_s=20)[0]
    assert dead.data() == b"poison"
    assert fine_seen


def test_delayed_delivery_waits_until_due(client, topic, api):
    consumer = client.subscribe(topic, "delayed", consumer_type=api.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    start = time.time()
    producer.send(b"later", deliver_after=timedelta(seconds=2))
    producer.send(b"now")
    first = receive_n(consumer, 1)[0]
    assert first.data() == b"now"
    later = receive_n(consumer, 1, timeout_s=10)[0]
    assert later.data() == b"later"
    assert time.time() - start >= 1.9


def test_redeliver_unacknowledged_sends_everything_again(client, topic):
    consumer = client.subscribe(topic, "redeliver-all")
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"{i}".encode())
    receive_n(consumer, 3, ack=False)
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 3)
    assert payloads(again) == [b"0", b"1", b"2"]
    assert all(m.redelivery_count() >= 1 for m in again)
    assert_nothing_more(consumer)
