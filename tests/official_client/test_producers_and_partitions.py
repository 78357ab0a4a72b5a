"""Producer access modes, partitioned topics, and the broker's answers to bad requests."""

from __future__ import annotations

import collections
import contextlib
import json
import urllib.request

import pulsar
import pytest

from tests.official_client.support import receive_n



@pytest.fixture
def client(any_client):
    """Every test here runs with the official client and with magnetar (tests/fixtures/broker.py)."""
    return any_client


def test_exclusive_producer_refuses_a_second(client, topic, api):
    client.create_producer(topic, access_mode=api.ProducerAccessMode.Exclusive)
    with pytest.raises((api.ProducerFenced, api.ProducerBusy)):
        client.create_producer(topic, access_mode=api.ProducerAccessMode.Exclusive)


def test_shared_producer_refused_while_an_exclusive_one_holds_the_topic(client, topic, api):
    client.create_producer(topic, access_mode=api.ProducerAccessMode.Exclusive)
    with pytest.raises(api.ProducerBusy):
        client.create_producer(topic)


def test_exclusive_with_fencing_takes_over(client, topic, api):
    consumer = client.subscribe(topic, "s")
    old = client.create_producer(topic, access_mode=api.ProducerAccessMode.Exclusive, send_timeout_millis=3000)
    old.send(b"from old")
    new = client.create_producer(topic, access_mode=api.ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"from new")
    with pytest.raises(api.PulsarException):
        old.send(b"must not arrive")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"from old", b"from new"]
    # A fenced producer is already closed on the client side; the official client
    # reports that as AlreadyClosed when it is closed again.
    with contextlib.suppress(api.PulsarException):
        old.close()


def test_wait_for_exclusive_gets_the_topic_when_the_holder_leaves(client, topic, api):
    holder = client.create_producer(topic, access_mode=api.ProducerAccessMode.Exclusive)
    import threading

    result = {}

    def create():
        result["producer"] = client.create_producer(topic, access_mode=api.ProducerAccessMode.WaitForExclusive)

    t = threading.Thread(target=create)
    t.start()
    t.join(1.0)
    assert t.is_alive(), "WaitForExclusive must wait while the exclusive holder is connected"
    holder.close()
    t.join(15)
    assert not t.is_alive()
    result["producer"].send(b"mine now")


def test_partitioned_topic_spreads_and_consumes_all(client, standalone, topic, api):
    name = topic.split("/")[-1]
    req = urllib.request.Request(f"{standalone.web_url}/admin/v2/persistent/public/default/{name}/partitions",
                                 data=b"3", method="PUT", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "p", consumer_type=api.ConsumerType.Shared)
    producer = client.create_producer(topic, message_routing_mode=api.PartitionsRoutingMode.RoundRobinDistribution,
                                      batching_enabled=False)
    for i in range(30):
        producer.send(f"{i}".encode())
    got = receive_n(consumer, 30)
    assert sorted(int(m.data()) for m in got) == list(range(30))
    by_partition = collections.Counter(m.topic_name() for m in got)
    assert len(by_partition) == 3
    stats = json.loads(urllib.request.urlopen(
        f"{standalone.web_url}/admin/v2/persistent/public/default/{name}/partitions", timeout=10).read())
    assert stats["partitions"] == 3


def test_invalid_topic_name_is_refused_and_the_client_keeps_working(standalone, topic, api):
    # The official client's C++ core counts InvalidTopicName as retriable: it asks again until its operation
    # timeout, so this client's is short (the shared fixture's 15 s made this the module's slowest test).
    kwargs = {"logger": api.ConsoleLogger(api.LoggerLevel.Warn)} if api.__name__ == "pulsar" else {}
    with contextlib.closing(api.Client(standalone.service_url, operation_timeout_seconds=5, **kwargs)) as client:
        with pytest.raises(api.PulsarException):
            client.create_producer("persistent://public/default/bad/extra/segments")
        with pytest.raises(api.PulsarException):
            client.subscribe("persistent://no-such-tenant/ns/topic", "s")
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "after-bad", initial_position=api.InitialPosition.Earliest)
        producer.send(b"ok")
        assert receive_n(consumer, 1)[0].data() == b"ok"
