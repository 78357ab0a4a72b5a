"""Exclusive and Failover subscriptions: which consumer is active, who must hear about a change, and its dispatcher.

Pulsar's rule (``AbstractDispatcherSingleActiveConsumer``): consumers are
ordered by priority level (the *lowest* number is the best), then by consumer
name (Java ``String.compareTo``, i.e. UTF-16 code units; equal names keep
connection order because the sort is stable). Only the consumers at the best
level compete:

- on partition ``i`` of a partitioned topic the ``i mod n``-th of them is
  active, so the partitions of a topic spread over the consumers;
- on a non-partitioned topic (``partition_index < 0``) the first one is active.
  Recent Pulsar versions instead place the competitors on a hash ring (100
  points per consumer, ``murmur3(name + j)``) and take the point at or after
  ``murmur3(topic name)``, so that many non-partitioned topics consumed by one
  multi-topic consumer group spread too; pass ``topic_name`` to get that.

When the active consumer changes every Failover consumer is told with
ACTIVE_CONSUMER_CHANGE (each learns whether it is now the active one); a
consumer that joins without changing the active consumer is told alone. An
Exclusive subscription sends no such notification.

``SingleActiveConsumerDispatcher`` (the I/O, at the end of this module) sends
every entry to the active consumer and rewinds the cursor when it changes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Generic, Protocol, Sequence, TypeVar

from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatcher import Dispatcher
from broker.subscriptions.key_shared import murmur3_32

HASH_RING_POINTS_PER_CONSUMER = 100  # Pulsar's CONSUMER_CONSISTENT_HASH_REPLICAS


class FailoverConsumer(Protocol):
    name: str
    priority_level: int


C = TypeVar("C", bound=FailoverConsumer)


def java_string_order(name: str) -> bytes:
    """A sort key ordering strings as Java's ``String.compareTo`` does (by UTF-16 code unit)."""
    return name.encode("utf-16-be", "surrogatepass")


def failover_order(consumers: Sequence[C]) -> list[C]:
    """Consumers sorted by priority level, then name; ties keep the given (connection) order."""
    return sorted(consumers, key=lambda c: (c.priority_level, java_string_order(c.name)))


def _masked_murmur3(text: str) -> int:
    return murmur3_32(text.encode("utf-8")) & 0x7FFFFFFF


def _hash_ring_index(names: Sequence[str], topic_name: str) -> int:
    """Index of the consumer owning ``topic_name`` on a ring of ``names`` (a later consumer wins a shared point)."""
    ring: dict[int, int] = {}
    for i, name in enumerate(names):
        for j in range(HASH_RING_POINTS_PER_CONSUMER):
            ring[_masked_murmur3(f"{name}{j}")] = i
    points = sorted(ring)
    target = _masked_murmur3(topic_name)
    for point in points:  # a ring of a few hundred points: a scan is cheap enough here
        if point >= target:
            return ring[point]
    return ring[points[0]]


def choose_active_consumer(consumers: Sequence[C], partition_index: int, topic_name: str | None = None) -> C | None:
    """The active consumer among ``consumers`` (given in connection order), or None when there are none.

    ``partition_index`` is the topic's partition (< 0 for a non-partitioned
    topic). ``topic_name``, when given, selects the hash-ring placement for a
    non-partitioned topic instead of "the first".
    """
    if not consumers:
        return None
    ordered = failover_order(consumers)
    best = ordered[0].priority_level
    competitors = [c for c in ordered if c.priority_level == best]
    if partition_index >= 0:
        return competitors[partition_index % len(competitors)]
    if topic_name is not None:
        return competitors[_hash_ring_index([c.name for c in competitors], topic_name)]
    return competitors[0]


@dataclass(frozen=True)
class ActiveConsumerElection(Generic[C]):
    """The outcome of (re)electing the active consumer.

    ``notify`` lists the consumers that must receive ACTIVE_CONSUMER_CHANGE now
    (each with ``is_active = consumer is active``). ``changed`` tells the
    dispatcher to hand the previous consumer's unacknowledged messages over:
    Pulsar rewinds the cursor to the mark-delete position and reads again.
    """

    active: C | None
    previous: C | None
    changed: bool
    notify: tuple[C, ...]


def elect_active_consumer(
    consumers: Sequence[C],
    previous: C | None,
    partition_index: int,
    *,
    joined: C | None = None,
    failover: bool = True,
    topic_name: str | None = None,
) -> ActiveConsumerElection[C]:
    """Re-elect after a consumer joined (pass it as ``joined``) or left (``consumers`` no longer holds it).

    ``previous`` is the active consumer before the change. Identity (``is``)
    decides whether the active consumer changed. Exclusive subscriptions pass
    ``failover=False`` and nobody is notified.
    """
    active = choose_active_consumer(consumers, partition_index, topic_name)
    changed = active is not previous
    if not failover or active is None:
        notify: tuple = ()
    elif changed:
        notify = tuple(consumers)
    elif joined is not None:
        notify = (joined,)
    else:
        notify = ()
    return ActiveConsumerElection(active, previous, changed, notify)


# ---- the dispatcher: I/O around the rules above ----------------------------------------------------------


class SingleActiveConsumerDispatcher(Dispatcher):
    """Exclusive and Failover: every entry goes to the one active consumer.

    Failover picks the active consumer by priority level, then name (and for a
    partition, rotates by partition index); every consumer hears
    ACTIVE_CONSUMER_CHANGE when that changes. A change of active consumer, or a
    redelivery request, rewinds the cursor to just after the mark-delete
    position so the new active consumer sees everything unacknowledged, in order.
    """

    def __init__(self, subscription, max_read_batch_size: int = 100, partition_index: int = -1, *, failover: bool = False):
        super().__init__(subscription, max_read_batch_size)
        self.partition_index = partition_index
        self.failover = failover  # only Failover consumers hear ACTIVE_CONSUMER_CHANGE, as in Pulsar
        self.active: Consumer | None = None

    def ready(self) -> bool:
        return self.active is not None and self.active.can_take()

    def read_count(self) -> int:
        return max(1, min(self.active.permits, self.max_read_batch_size))

    async def read(self, count: int):
        return await self.read_tail(count)

    def dispatch(self, entries) -> bool:
        if self.active is None:
            return False
        out = self.entries_to_send(entries)
        self.active.deliver(out)
        self.subscription.record_out(out)
        return True

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._pick_active(initial=True)
        self.start()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> list:
        released = super().remove_consumer(consumer)
        for p in released:
            self.redelivery.increment(p)
        if consumer is self.active:
            self.active = None
            self._pick_active()
            asyncio.get_running_loop().create_task(self._rewind())
        return released

    def _pick_active(self, initial: bool = False) -> None:
        chosen = choose_active_consumer(self.consumers, self.partition_index)
        changed = chosen is not self.active
        previous, self.active = self.active, chosen
        if changed and previous is not None and previous in self.consumers:
            # The old active consumer's unacked messages go to the new one after a rewind.
            for p in previous.pending.release_all():
                self.redelivery.increment(p)
            asyncio.get_running_loop().create_task(self._rewind())
        if self.failover and (changed or initial):
            for c in self.consumers:
                c.connection.out.active_consumer_change(c.consumer_id, c is self.active)

    async def _rewind(self) -> None:
        self.cursor.rewind()
        await self.restart()

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        if consumer is not self.active:
            return
        for p in consumer.pending.release_all():
            self.redelivery.increment(p)
        consumer.redeliveries += 1
        await self._rewind()
