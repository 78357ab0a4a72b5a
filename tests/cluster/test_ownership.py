"""Several brokers on one ZooKeeper and one set of bookies: one owner per topic, lookups reach it, failover fences."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest

import magnetar

from storage.testing.waiting import wait_until
from tests.cluster.support import Production, client as _client, lookup as _lookup, owner_of
from tests.official_client.support import distinct_in_order, receive_n


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
    entry = two_brokers[1]
    official = _client(entry.service_url)
    ours = magnetar.Client(entry.service_url, operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            official.create_producer("persistent://public/no-such-ns/t")
        with pytest.raises(magnetar.TopicNotFound, match="no-such-ns"):
            ours.create_producer("persistent://public/no-such-ns/t")
        # The official C++ client retries InvalidTopicName lookups until its operation timeout (it is not in its
        # list of fatal results; Pulsar's broker answers the same code), so the specific error is checked with
        # magnetar and over HTTP.
        with pytest.raises(magnetar.InvalidTopicName, match="expected persistent://<tenant>/<namespace>/<topic>"):
            ours.create_producer("persistent://public/default/a/b")
    finally:
        official.close()
        ours.close()
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(f"{entry.web_url}/lookup/v2/topic/persistent/public/default/bad%01name", timeout=30)
    assert bad.value.code == 412 and "control characters are not allowed" in bad.value.read().decode()


@pytest.mark.parametrize("api", [pulsar, magnetar], ids=["pulsar-client", "magnetar"])
def test_kill_9_of_the_owner_moves_the_topic_and_loses_nothing_acknowledged(two_brokers, api):
    topic = f"persistent://public/default/failover-target-{api.__name__}"
    owner = owner_of(two_brokers, topic)
    survivor = next(b for b in two_brokers if b is not owner)
    client = _client(survivor.service_url, api)  # the client enters through the survivor and is redirected
    try:
        consumer = client.subscribe(topic, "durable")
        production = Production(api, [client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)])
        try:
            production.wait_for_more(100, 30, "100 acknowledged sends before the kill")
            owner.kill9()
            mark = production.total()
            # Never the dead address: the lookup is answered once the dead owner's session has expired.
            assert _lookup(survivor, topic) == survivor.service_url
            wait_until(lambda: production.total() >= mark + 100, 60, "sends to resume on the new owner")
        finally:
            production.stop()
        assert production.errors == []  # the sends in flight waited for the new owner (send timeout 60 s)
        assert distinct_in_order(consumer, production.total()) == production.acked[0]  # every acknowledged one, in order
    finally:
        client.close()


def test_a_paused_owner_loses_the_topic_and_nothing_it_writes_afterwards_is_readable(two_brokers):
    from magnetar.protocol import pulsar_api_pb2 as pb
    from magnetar.protocol.frames import command, encode_command, encode_payload_command
    from tests.official_client.support import RawConnection

    T = pb.BaseCommand
    topic = "persistent://public/default/paused-owner"
    old = owner_of(two_brokers, topic)
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


@pytest.mark.parametrize("how", ["unload-bundle", "stop-broker"])
def test_graceful_hand_off_surfaces_no_error(two_brokers, how):
    topic = f"persistent://public/default/graceful-{how}"
    owner = owner_of(two_brokers, topic)
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

        production = Production(pulsar, [client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)])
        try:
            production.wait_for_more(50, 30, "50 acknowledged sends")
            hand_off()
            production.wait_for_more(50, 60, "sends to continue after the hand-off")
        finally:
            production.stop()
        assert production.errors == []
        assert distinct_in_order(consumer, production.total()) == production.acked[0]
    finally:
        client.close()
