"""Several brokers on one ZooKeeper and one set of bookies: one owner per topic, lookups reach it, failover fences."""

from __future__ import annotations

import json
import threading
import urllib.request

import pulsar
import pytest

import magnetar

from tests.harness.processes import BrokerProcess, wait_until
from tests.official_client.support import distinct_in_order, receive_n

SESSION = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}


@pytest.fixture
def two_brokers(start_bookies, tmp_path):
    cluster = start_bookies(3)
    brokers = [BrokerProcess(tmp_path / f"broker-{i}", metadata_url=cluster.metadata_url, env=dict(SESSION)) for i in range(2)]
    for b in brokers:
        b.spawn()
    for b in brokers:
        b.wait_healthy(60)
    yield brokers
    for b in brokers:
        b.stop()


def _lookup(broker, topic):
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/lookup/v2/topic/persistent/{name}", timeout=10) as resp:
        return json.loads(resp.read())["brokerUrl"]


def _client(url, api=pulsar):
    if api is pulsar:
        return pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    return api.Client(url, operation_timeout_seconds=30)


def test_lookup_through_either_broker_reaches_the_one_owner(two_brokers):
    topics = [f"persistent://public/default/own-{i}" for i in range(8)]
    owners = {t: _lookup(two_brokers[0], t) for t in topics}
    assert {_lookup(two_brokers[1], t) for t in topics} <= {b.service_url for b in two_brokers}
    assert all(_lookup(two_brokers[1], t) == owners[t] for t in topics)
    for entry_broker in two_brokers:
        client = _client(entry_broker.service_url)
        try:
            for t in topics[:3]:
                consumer = client.subscribe(t, f"via-{entry_broker.port}")
                client.create_producer(t).send(b"hello")
                assert receive_n(consumer, 1)[0].data() == b"hello"
        finally:
            client.close()


def test_an_invalid_or_unknown_namespace_topic_gets_a_clear_error(two_brokers):
    client = _client(two_brokers[1].service_url)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/no-such-ns/t")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/a/b")
    finally:
        client.close()


@pytest.mark.parametrize("api", [pulsar, magnetar], ids=["pulsar-client", "magnetar"])
def test_kill_9_of_the_owner_moves_the_topic_and_loses_nothing_acknowledged(two_brokers, api):
    topic = f"persistent://public/default/failover-target-{api.__name__}"
    owner_url = _lookup(two_brokers[0], topic)
    owner = next(b for b in two_brokers if b.service_url == owner_url)
    survivor = next(b for b in two_brokers if b is not owner)
    client = _client(survivor.service_url, api)  # the client enters through the survivor and is redirected
    try:
        consumer = client.subscribe(topic, "durable")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        acked: list[int] = []
        stop = threading.Event()

        def produce():
            i = 0
            while not stop.is_set():
                try:
                    producer.send(f"{i}".encode())
                except api.PulsarException:
                    continue  # the send timed out across the failover: it may or may not be stored
                acked.append(i)
                i += 1

        worker = threading.Thread(target=produce)
        worker.start()
        wait_until(lambda: len(acked) >= 100, 30, "100 acknowledged sends before the kill")
        owner.kill9()
        mark = len(acked)
        wait_until(lambda: len(acked) >= mark + 100, 60, "sends to resume on the new owner")
        stop.set()
        worker.join(60)
        assert _lookup(survivor, topic) == survivor.service_url
        assert distinct_in_order(consumer, len(acked)) == acked  # every acknowledged message, in order
    finally:
        client.close()


def test_a_paused_owner_loses_the_topic_and_nothing_it_writes_afterwards_is_readable(two_brokers):
    from magnetar.protocol import pulsar_api_pb2 as pb
    from magnetar.protocol.frames import command, encode_command, encode_payload_command
    from tests.official_client.support import RawConnection

    T = pb.BaseCommand
    topic = "persistent://public/default/paused-owner"
    owner_url = _lookup(two_brokers[0], topic)
    old = next(b for b in two_brokers if b.service_url == owner_url)
    new = next(b for b in two_brokers if b is not old)

    def send(conn, seq, payload):
        md = pb.MessageMetadata(producer_name="raw", sequence_id=seq, publish_time=1)
        conn.send(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq)), md, payload))

    raw = RawConnection(old.port)
    try:
        raw.connect()
        raw.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))))
        assert raw.next().type == T.PRODUCER_SUCCESS
        send(raw, 0, b"before the pause")
        assert raw.next().type == T.SEND_RECEIPT
        old.pause()
        try:
            wait_until(lambda: _lookup(new, topic) == new.service_url, 30, "the other broker to take the topic over")
            client = _client(new.service_url)
            client.create_producer(topic).send(b"from the new owner")
            send(raw, 1, b"from the paused owner")  # sits in the old owner's socket until it wakes up
        finally:
            old.resume()
        replies = []
        try:
            while True:
                replies.append(raw.next().type)
                if T.SEND_ERROR in replies or T.CLOSE_PRODUCER in replies:
                    break
                assert T.SEND_RECEIPT not in replies, "the old owner must not acknowledge a write"
        except (ConnectionResetError, OSError):
            pass  # closing the connection is an acceptable answer too
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        seen = []
        while reader.has_message_available():
            seen.append(reader.read_next(5000).data())
        assert seen == [b"before the pause", b"from the new owner"]
        client.close()
    finally:
        raw.close()


def _steady_production(client, topic, during):
    """Produce while ``during()`` runs; returns (acknowledged values, errors seen by the application)."""
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
    acked, errors, stop = [], [], threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            try:
                producer.send(f"{i}".encode())
                acked.append(i)
            except pulsar.PulsarException as exc:
                errors.append(exc)
            i += 1

    worker = threading.Thread(target=produce)
    worker.start()
    wait_until(lambda: len(acked) >= 50, 30, "50 acknowledged sends")
    during()
    mark = len(acked)
    wait_until(lambda: len(acked) >= mark + 50 or errors, 60, "sends to continue after the hand-off")
    stop.set()
    worker.join(60)
    return acked, errors


@pytest.mark.parametrize("how", ["unload-bundle", "stop-broker"])
def test_graceful_hand_off_surfaces_no_error(two_brokers, how):
    topic = f"persistent://public/default/graceful-{how}"
    owner_url = _lookup(two_brokers[0], topic)
    owner = next(b for b in two_brokers if b.service_url == owner_url)
    survivor = next(b for b in two_brokers if b is not owner)
    client = _client(survivor.service_url)
    try:
        consumer = client.subscribe(topic, "durable")

        def hand_off():
            if how == "stop-broker":
                assert owner.stop() == 0
                return
            with urllib.request.urlopen(f"{owner.web_url}/admin/v2/namespaces/public/default/bundles", timeout=10) as resp:
                bundles = json.loads(resp.read())["owned"]
            for bundle in bundles:
                req = urllib.request.Request(f"{owner.web_url}/admin/v2/namespaces/public/default/{bundle}/unload", method="PUT")
                urllib.request.urlopen(req, timeout=30).read()

        acked, errors = _steady_production(client, topic, hand_off)
        assert errors == []
        assert distinct_in_order(consumer, len(acked)) == acked
    finally:
        client.close()
