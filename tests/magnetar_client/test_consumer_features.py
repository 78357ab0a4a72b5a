"""magnetar consumer features beyond the basics: ack timeout, dead-letter policy, listeners, patterns, chunks."""

from __future__ import annotations

import re
import threading
import time

import pulsar
import pytest

import magnetar
from tests.official_client.support import payloads, receive_n


@pytest.fixture
def mclient(standalone):
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    yield c
    c.close()


def test_ack_timeout_redelivers(mclient, topic):
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, unacked_messages_timeout_ms=300)
    producer = mclient.create_producer(topic)
    producer.send(b"a")
    producer.send(b"b")
    first = receive_n(consumer, 2, ack=False)
    consumer.acknowledge(first[0])
    again = receive_n(consumer, 1, timeout_s=10)[0]
    assert again.data() == b"b" and again.redelivery_count() >= 1


def test_dead_letter_policy_moves_a_poison_message(mclient, topic):
    dlq = topic + "-DLQ"
    watcher = mclient.subscribe(dlq, "watch", initial_position=magnetar.InitialPosition.Earliest)
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=50,
                                 dead_letter_policy=magnetar.DeadLetterPolicy(2, dead_letter_topic=dlq))
    producer = mclient.create_producer(topic)
    producer.send(b"poison", properties={"p": "1"})
    seen = 0
    deadline = time.monotonic() + 15
    while seen < 3 and time.monotonic() < deadline:
        msg = receive_n(consumer, 1, ack=False)[0]
        assert msg.redelivery_count() == seen
        consumer.negative_acknowledge(msg)
        seen += 1
    dead = receive_n(watcher, 1, timeout_s=15)[0]
    assert dead.data() == b"poison" and dead.properties()["p"] == "1" and dead.properties()["REAL_TOPIC"] == topic


def test_message_listener_gets_every_message_in_order(mclient, topic):
    got, done = [], threading.Event()

    def listener(consumer, msg):
        got.append(msg.data())
        consumer.acknowledge(msg)  # a blocking facade call is fine on the listener thread
        if len(got) == 20:
            done.set()

    mclient.subscribe(topic, "listen", message_listener=listener)
    producer = mclient.create_producer(topic, batching_enabled=True)
    for i in range(20):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    assert done.wait(15)
    assert got == [f"{i}".encode() for i in range(20)]


def test_regex_subscription(mclient, standalone):
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{standalone.web_url}/admin/v2/namespaces/public/mpattern", method="PUT"),
                           timeout=10).read()
    for i in range(2):
        mclient.create_producer(f"persistent://public/mpattern/evt-{i}").send(f"e{i}".encode())
    mclient.create_producer("persistent://public/mpattern/other").send(b"no")
    consumer = mclient.subscribe(re.compile("persistent://public/mpattern/evt-.*"), "all",
                                 initial_position=magnetar.InitialPosition.Earliest)
    assert sorted(payloads(receive_n(consumer, 2))) == [b"e0", b"e1"]


def test_chunked_messages_interoperate_both_ways(mclient, standalone, topic):
    big = bytes(range(256)) * (11 * 1024 * 1024 // 256)
    official = pulsar.Client(standalone.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        theirs = official.subscribe(topic, "theirs")
        ours = mclient.subscribe(topic, "ours")
        mclient.create_producer(topic, chunking_enabled=True).send(big)
        official.create_producer(topic, chunking_enabled=True, batching_enabled=False).send(big[::-1])
        assert [m.data() == d for m, d in zip(receive_n(theirs, 2), (big, big[::-1]))] == [True, True]
        got = receive_n(ours, 2)
        assert got[0].data() == big and got[1].data() == big[::-1]
    finally:
        official.close()
    with pytest.raises(magnetar.MessageTooBig, match="enable chunking"):
        mclient.create_producer(topic).send(big)


def test_exclusive_access_mode(mclient, topic):
    mclient.create_producer(topic, access_mode=magnetar.ProducerAccessMode.Exclusive)
    with pytest.raises(magnetar.ProducerFenced):
        mclient.create_producer(topic, access_mode=magnetar.ProducerAccessMode.Exclusive)


def test_key_based_batches_spread_over_key_shared_consumers_in_key_order(mclient, topic):
    consumers = [mclient.subscribe(topic, "ks", consumer_type=magnetar.ConsumerType.KeyShared, consumer_name=f"c{i}")
                 for i in range(3)]
    producer = mclient.create_producer(topic, batching_enabled=True, batching_type=magnetar.BatchingType.KeyBased,
                                       batching_max_publish_delay_ms=20)
    for i in range(300):
        producer.send_async(f"{i}".encode(), None, partition_key=f"key-{i % 12}")
    producer.flush()
    owner, order, received = {}, {}, 0
    deadline = time.monotonic() + 30
    while received < 300 and time.monotonic() < deadline:
        for idx, c in enumerate(consumers):
            try:
                msg = c.receive(timeout_millis=50)
            except magnetar.Timeout:
                continue
            key = msg.partition_key()
            assert owner.setdefault(key, idx) == idx, f"{key} reached two consumers"
            order.setdefault(key, []).append(int(msg.data()))
            c.acknowledge(msg)
            received += 1
    assert received == 300
    assert all(v == sorted(v) for v in order.values())
    assert len(set(owner.values())) >= 2  # batches carry their key, so keys spread over consumers
