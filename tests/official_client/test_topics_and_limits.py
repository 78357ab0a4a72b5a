"""Topic discovery by pattern, auto-creation switched off, and the unacked-message limit of Shared consumers."""

from __future__ import annotations

import json
import re
import urllib.request

import pulsar
import pytest

from tests.official_client.support import assert_nothing_more, receive_n


def _post(broker, path, body):
    req = urllib.request.Request(f"{broker.web_url}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def _put(broker, path):
    urllib.request.urlopen(urllib.request.Request(f"{broker.web_url}{path}", method="PUT"), timeout=10).read()


def test_pattern_subscription_finds_topics_of_the_namespace(standalone, client):
    _put(standalone, "/admin/v2/namespaces/public/pattern")
    producers = [client.create_producer(f"persistent://public/pattern/orders-{i}") for i in range(3)]
    client.create_producer("persistent://public/pattern/other")
    consumer = client.subscribe(re.compile("persistent://public/pattern/orders-.*"), "all-orders",
                                initial_position=pulsar.InitialPosition.Earliest)
    for i, p in enumerate(producers):
        p.send(f"from {i}".encode())
    got = sorted(m.data() for m in receive_n(consumer, 3))
    assert got == [b"from 0", b"from 1", b"from 2"]


def test_without_auto_creation_unknown_topics_are_refused(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_ALLOW_AUTO_TOPIC_CREATION": "false"})
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("persistent://public/default/not-created")
        _put(broker, "/admin/v2/persistent/public/default/not-created")
        client.create_producer("persistent://public/default/not-created").send(b"now it exists")
    finally:
        client.close()


def test_shared_consumer_stops_at_its_unacked_limit(standalone, client):
    _put(standalone, "/admin/v2/namespaces/public/unacked")
    _post(standalone, "/admin/v2/namespaces/public/unacked/maxUnackedMessagesPerConsumer", 5)
    topic = "persistent://public/unacked/limited"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"{i}".encode())
    held = receive_n(consumer, 5, ack=False)
    assert_nothing_more(consumer, within_ms=700)  # blocked at 5 unacked messages
    for m in held:
        consumer.acknowledge(m)
    assert len(receive_n(consumer, 15)) == 15  # unblocked once the acks arrive
