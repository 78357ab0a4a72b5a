"""Delivery that must never stall: Key_Shared with busy, joining and leaving consumers, and seeks.

Each test runs with the official client and with magnetar against `broker standalone`. The Key_Shared cases
check the subscription type's guarantees (each key to one consumer, in order per key) while consumers
stop receiving, join and leave mid-stream; the seek cases check that after a seek returns the consumer only
ever sees messages from the new position, however close together the seeks are.
"""

from __future__ import annotations

import threading
import time

import pulsar  # noqa: F401 (one of the two clients these tests drive)
import pytest

from broker.subscriptions.key_shared import ConsistentHashingSelector, sticky_key_hash
from tests.official_client.support import TIMEOUTS, receive_n

KEYS = 20


@pytest.fixture
def client(any_client):
    return any_client


def _key_shared(client, api, topic, name, **kwargs):
    return client.subscribe(topic, "ks", consumer_type=api.ConsumerType.KeyShared, consumer_name=name, **kwargs)


def _send_keyed(producer, start: int, count: int) -> None:
    for i in range(start, start + count):
        producer.send(f"{i}".encode(), partition_key=f"k{i % KEYS}")


class Drain:
    """Polls consumers from one thread, acknowledging everything; records (consumer, key, index) in the order
    the application saw them, so per-key order and key ownership can be checked afterwards."""

    def __init__(self, consumers):
        self.consumers = list(consumers)
        self.seen: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def poll_once(self, timeout_ms: int = 20) -> int:
        got = 0
        with self._lock:
            consumers = list(self.consumers)
        for consumer in consumers:
            while True:
                try:
                    msg = consumer.receive(timeout_millis=timeout_ms)
                except TIMEOUTS:
                    break
                self.seen.append((consumer.consumer_name(), msg.partition_key(), int(msg.data())))
                consumer.acknowledge(msg)
                got += 1
        return got

    def until(self, n_distinct: int, timeout_s: float, between=None) -> None:
        deadline = time.monotonic() + timeout_s
        while len({i for _, _, i in self.seen}) < n_distinct:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len({i for _, _, i in self.seen})} of {n_distinct} messages arrived")
            self.poll_once()
            if between is not None:
                between()

    def add(self, consumer) -> None:
        with self._lock:
            self.consumers.append(consumer)

    def remove(self, consumer) -> None:
        with self._lock:
            self.consumers.remove(consumer)


def _assert_key_order(seen, total: int) -> None:
    """Every index arrived, and per key the first arrivals are in send order."""
    assert {i for _, _, i in seen} == set(range(total))
    first: dict[int, int] = {}
    for order, (_, _, i) in enumerate(seen):
        first.setdefault(i, order)
    for k in range(KEYS):
        firsts = sorted((first[i], i) for i in range(k, total, KEYS))
        assert [i for _, i in firsts] == list(range(k, total, KEYS)), f"key k{k} out of order"


def test_key_shared_three_consumers_receive_every_message_at_once(client, topic, api):
    """The scenario of users' Key_Shared reports: three consumers before any send, 600 unbatched messages over
    20 keys. Everything is handed out as it is sent: draining right after the last send finds all 600 in the
    consumers' queues, each key with one consumer, in order."""
    consumers = [_key_shared(client, api, topic, f"c{i}") for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False)
    _send_keyed(producer, 0, 600)
    drain = Drain(consumers)
    drain.until(600, 20)
    _assert_key_order(drain.seen, 600)
    owners: dict[str, set[str]] = {}
    for name, key, _ in drain.seen:
        owners.setdefault(key, set()).add(name)
    assert all(len(names) == 1 for names in owners.values()), owners
    assert len(drain.seen) == 600  # nothing was delivered twice


def test_a_key_shared_consumer_that_stops_receiving_holds_back_only_its_own_keys(client, topic, api):
    """A consumer whose application stops calling receive (its small queue fills) must not stall the others.
    Before the look-ahead, the unsendable entries at the head of the replay queue were read again and again
    and the other two consumers stopped after 10 messages."""
    names = ["idle", "c0", "c1"]
    ring = ConsistentHashingSelector()  # the broker's own key -> consumer rule, to know whose keys are whose
    for name in names:
        ring.add_consumer(name)
    owner = {f"k{k}": ring.select(sticky_key_hash(f"k{k}".encode())) for k in range(KEYS)}
    idle_keys = {key for key, name in owner.items() if name == "idle"}
    assert idle_keys and len(idle_keys) < KEYS  # the scenario needs keys on both sides
    idle, *busy = [_key_shared(client, api, topic, name, receiver_queue_size=10) for name in names]
    producer = client.create_producer(topic, batching_enabled=False)
    _send_keyed(producer, 0, 600)
    others = [i for i in range(600) if f"k{i % KEYS}" not in idle_keys]
    drain = Drain(busy)
    drain.until(len(others), 20)
    assert sorted(i for _, _, i in drain.seen) == others
    rest = Drain([idle])  # the idle application resumes: its keys, in order, from the start
    rest.until(600 - len(others), 20)
    assert {key for _, key, _ in rest.seen} == idle_keys
    _assert_key_order(drain.seen + rest.seen, 600)


def test_key_shared_consumers_joining_and_leaving_mid_stream_keep_per_key_order(client, topic, api):
    consumers = [_key_shared(client, api, topic, f"c{i}", receiver_queue_size=50) for i in range(2)]
    producer = client.create_producer(topic, batching_enabled=False)
    drain = Drain(consumers)
    total, step = 0, 100
    _send_keyed(producer, total, step)
    total += step
    drain.until(50, 20)
    joined = _key_shared(client, api, topic, "joined", receiver_queue_size=50)  # joins with messages out
    drain.add(joined)
    _send_keyed(producer, total, step)
    total += step
    drain.until(150, 20)
    leaving = consumers[0]
    drain.remove(leaving)
    leaving.close()  # what it held unacknowledged goes to the others, ahead of newer messages of its keys
    _send_keyed(producer, total, step)
    total += step
    drain.until(total, 30)
    _assert_key_order(drain.seen, total)


def _seek_and_expect(consumer, target, expected: bytes) -> None:
    consumer.seek(target)
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == expected
    consumer.acknowledge(msg)


def test_a_consumer_never_sees_a_message_dispatched_for_an_earlier_seek(client, topic, api):
    """Seeks back to back: by id, by (ledger, entry), by publish time, again by time. Before the broker
    answered a seek only after closing the consumer, the official client completed the seek early and kept
    the previous seek's start id, so after the seek to message 42's time it skipped to message 61."""
    consumer = client.subscribe(topic, "seeks", consumer_type=api.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(100):
        ids.append(producer.send(f"hello-{i}".encode()))
        time.sleep(0.02)  # distinct publish times, one per 20 ms, so a time names one message
    received = receive_n(consumer, 100)
    times = [m.publish_timestamp() for m in received]
    assert [m.data() for m in received] == [f"hello-{i}".encode() for i in range(100)]
    _seek_and_expect(consumer, api.MessageId.earliest, b"hello-0")
    _seek_and_expect(consumer, ids[50], b"hello-51")  # as the official clients do: the sought id is skipped
    _seek_and_expect(consumer, api.MessageId(ledger_id=ids[60].ledger_id(), entry_id=ids[60].entry_id()), b"hello-61")
    _seek_and_expect(consumer, times[42], b"hello-42")
    _seek_and_expect(consumer, times[10], b"hello-10")
    consumer.seek(times[70])
    consumer.seek(times[30])  # no gap at all between two seeks
    assert [m.data() for m in receive_n(consumer, 3)] == [b"hello-30", b"hello-31", b"hello-32"]


def test_a_reader_reads_on_after_seeking_back(client, topic, api):
    """A reader that read everything seeks back to message 49: the next read is message 50 (the old client
    completed the seek early and resubscribed after its last read, so the read timed out)."""
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"hello-{i}".encode()) for i in range(100)]
    reader = client.create_reader(topic, api.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=5000).data())
    assert len(got) == 100
    reader.seek(ids[49])
    assert reader.read_next(timeout_millis=5000).data() == b"hello-50"
    reader.seek(ids[10])
    assert reader.read_next(timeout_millis=5000).data() == b"hello-11"
    reader.seek(api.MessageId.earliest)
    assert [reader.read_next(timeout_millis=5000).data() for _ in range(2)] == [b"hello-0", b"hello-1"]
