"""Exclusive, Failover, Shared and Key_Shared subscriptions as the official client sees them."""

from __future__ import annotations

import collections
import time

import pulsar  # noqa: F401 (one of the two clients these tests drive)
import pytest

from tests.official_client.support import TIMEOUTS, assert_nothing_more, payloads, receive_n



@pytest.fixture
def client(any_client):
    """Every test here runs with the official client and with magnetar (tests/fixtures/broker.py)."""
    return any_client


def test_exclusive_refuses_a_second_consumer(client, topic, api):
    client.subscribe(topic, "ex", consumer_type=api.ConsumerType.Exclusive)
    with pytest.raises(api.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=api.ConsumerType.Exclusive)


def test_a_different_subscription_type_is_refused(client, topic, api):
    client.subscribe(topic, "typed", consumer_type=api.ConsumerType.Shared)
    with pytest.raises(api.ConsumerBusy):
        client.subscribe(topic, "typed", consumer_type=api.ConsumerType.Failover)


def test_failover_moves_to_the_standby_when_the_active_consumer_leaves(client, topic, api):
    first = client.subscribe(topic, "fo", consumer_type=api.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(topic, "fo", consumer_type=api.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"{i}".encode())
    # "a" sorts first: it is the active consumer and gets everything; "b" gets nothing.
    assert payloads(receive_n(first, 5)) == [b"0", b"1", b"2", b"3", b"4"]
    assert_nothing_more(second)
    first.close()
    for i in range(5, 8):
        producer.send(f"{i}".encode())
    assert payloads(receive_n(second, 3)) == [b"5", b"6", b"7"]


def test_failover_hands_unacked_messages_to_the_new_active_consumer(client, topic, api):
    first = client.subscribe(topic, "fo2", consumer_type=api.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(topic, "fo2", consumer_type=api.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"{i}".encode())
    got = receive_n(first, 4, ack=False)
    first.acknowledge(got[0])
    first.acknowledge(got[1])
    first.close()
    assert payloads(receive_n(second, 2)) == [b"2", b"3"]


def test_shared_spreads_messages_and_each_is_delivered_once(client, topic, api):
    consumers = [client.subscribe(topic, "sh", consumer_type=api.ConsumerType.Shared, receiver_queue_size=10)
                 for _ in range(3)]
    producer = client.create_producer(topic)
    for i in range(300):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    seen = collections.Counter()
    per_consumer = collections.Counter()
    deadline = time.monotonic() + 30
    while sum(seen.values()) < 300 and time.monotonic() < deadline:
        for idx, c in enumerate(consumers):
            try:
                msg = c.receive(timeout_millis=50)
            except TIMEOUTS:
                continue
            seen[msg.data()] += 1
            per_consumer[idx] += 1
            c.acknowledge(msg)
    assert len(seen) == 300 and set(seen.values()) == {1}
    assert all(per_consumer[i] > 0 for i in range(3)), per_consumer


def test_key_shared_sends_each_key_to_one_consumer_in_order(client, topic, api):
    consumers = [client.subscribe(topic, "ks", consumer_type=api.ConsumerType.KeyShared, consumer_name=f"c{i}")
                 for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(20)]
    for i in range(400):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % 20])
    producer.flush()
    owner: dict[str, int] = {}
    order: dict[str, list[int]] = collections.defaultdict(list)
    received = 0
    deadline = time.monotonic() + 30
    while received < 400 and time.monotonic() < deadline:
        for idx, c in enumerate(consumers):
            try:
                msg = c.receive(timeout_millis=50)
            except TIMEOUTS:
                continue
            key = msg.partition_key()
            assert owner.setdefault(key, idx) == idx, f"key {key} went to two consumers"
            order[key].append(int(msg.data()))
            c.acknowledge(msg)
            received += 1
    assert received == 400
    for key, values in order.items():
        assert values == sorted(values), f"key {key} out of order"
    assert len(set(owner.values())) >= 2  # the hash ring spreads 20 keys over more than one consumer
