"""Readers (non-durable subscriptions), has_message_available, seek and get_last_message_id."""

from __future__ import annotations

import time

import pulsar  # noqa: F401 (one of the two clients these tests drive)
import pytest

from tests.official_client.support import assert_nothing_more, payloads, receive_n



@pytest.fixture
def client(any_client):
    """Every test here runs with the official client and with magnetar (tests/fixtures/broker.py)."""
    return any_client


def _produce(client, topic, n, batching=False):
    producer = client.create_producer(topic, batching_enabled=batching)
    ids = [producer.send(f"{i}".encode()) for i in range(n)]
    return producer, ids


def _read_all(reader, n, timeout_ms=5000):
    return [reader.read_next(timeout_millis=timeout_ms).data() for _ in range(n)]


def test_reader_from_earliest_sees_everything(client, topic, api):
    _produce(client, topic, 5)
    reader = client.create_reader(topic, api.MessageId.earliest)
    assert _read_all(reader, 5) == [b"0", b"1", b"2", b"3", b"4"]
    assert not reader.has_message_available()


def test_reader_from_latest_sees_only_new_messages(client, topic, api):
    producer, _ = _produce(client, topic, 3)
    reader = client.create_reader(topic, api.MessageId.latest)
    assert not reader.has_message_available()
    producer.send(b"new")
    assert reader.read_next(timeout_millis=5000).data() == b"new"


def test_reader_from_a_given_id_exclusive_and_inclusive(client, topic):
    _, ids = _produce(client, topic, 5)
    reader = client.create_reader(topic, ids[2])
    assert _read_all(reader, 2) == [b"3", b"4"]
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert _read_all(inclusive, 3) == [b"2", b"3", b"4"]


def test_has_message_available_tracks_the_tail(client, topic, api):
    producer, _ = _produce(client, topic, 2, batching=True)
    reader = client.create_reader(topic, api.MessageId.earliest)
    assert reader.has_message_available()
    _read_all(reader, 2)
    assert not reader.has_message_available()
    producer.send(b"more")
    assert reader.has_message_available()


def test_get_last_message_id_matches_the_last_send(client, topic):
    consumer = client.subscribe(topic, "last")
    _, ids = _produce(client, topic, 4)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


def test_seek_by_message_id_replays_from_there(client, topic, api):
    consumer = client.subscribe(topic, "seek", initial_position=api.InitialPosition.Earliest)
    _, ids = _produce(client, topic, 6)
    receive_n(consumer, 6)
    consumer.seek(ids[3])
    # The broker rewinds to the entry itself; the C++ client treats the seek target as already
    # consumed and delivers from the next message on.
    assert payloads(receive_n(consumer, 2)) == [b"4", b"5"]
    assert_nothing_more(consumer)


def test_seek_by_publish_time(client, topic, api):
    consumer = client.subscribe(topic, "seek-time", initial_position=api.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"old-{i}".encode())
    receive_n(consumer, 3)
    boundary_ms = int(time.time() * 1000) + 1
    deadline = time.monotonic() + 2
    while int(time.time() * 1000) <= boundary_ms and time.monotonic() < deadline:
        pass  # publish times are in ms: the next send must be strictly after the boundary
    for i in range(2):
        producer.send(f"new-{i}".encode())
    receive_n(consumer, 2)
    consumer.seek(boundary_ms)
    assert payloads(receive_n(consumer, 2)) == [b"new-0", b"new-1"]
    assert_nothing_more(consumer)


def test_reader_seek_to_earliest(client, topic, api):
    _produce(client, topic, 3)
    reader = client.create_reader(topic, api.MessageId.latest)
    reader.seek(api.MessageId.earliest)
    assert _read_all(reader, 3) == [b"0", b"1", b"2"]
