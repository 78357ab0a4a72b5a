"""Which consumer of a Failover (or Exclusive) subscription is active, and who must hear about a change.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, Sequence, TypeVar

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
