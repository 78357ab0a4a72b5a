"""Each subscription type's dispatch rules as pure tables: who gets an entry, and when."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from broker.errors import ConsumerAssignError
from broker.subscriptions.delayed_delivery import DelayedDeliveryTracker
from broker.subscriptions.key_shared import (
    ConsistentHashingSelector, RecentlyJoined, StickyRangesSelector, murmur3_32, sticky_key_hash,
)
from broker.subscriptions.pending_acks import PendingAcks
from broker.subscriptions.redelivery import RedeliveryTracker, ReplayQueue
from broker.subscriptions.shared import RoundRobinSelector
from broker.subscriptions.single_active import choose_active_consumer


@dataclass(eq=False)
class C:
    name: str
    priority_level: int = 0
    permits: int = 10


# ---- Failover -------------------------------------------------------------------------


@pytest.mark.parametrize("consumers, partition, active", [
    ([], -1, None),
    ([C("b"), C("a")], -1, "a"),
    ([C("a", 1), C("b", 0)], -1, "b"),  # the lower priority level wins before names
    ([C("a"), C("b"), C("c")], 0, "a"),
    ([C("a"), C("b"), C("c")], 1, "b"),
    ([C("a"), C("b"), C("c")], 5, "c"),  # partitions rotate over the consumers
    ([C("a", 2), C("b", 1), C("c", 1)], 2, "b"),
])
def test_failover_active_consumer(consumers, partition, active):
    chosen = choose_active_consumer(consumers, partition)
    assert (chosen.name if chosen else None) == active


def test_failover_ties_keep_connection_order():
    first, second = C("same"), C("same")
    assert choose_active_consumer([first, second], -1) is first


# ---- Shared ------------------------------------------------------------------------------


def test_round_robin_takes_turns_and_skips_consumers_without_permits():
    a, b, c = C("a"), C("b", permits=0), C("c")
    rr = RoundRobinSelector()
    picks = [rr.next([a, b, c], lambda x: x.permits > 0).name for _ in range(4)]
    assert picks == ["a", "c", "a", "c"]
    assert rr.next([b], lambda x: x.permits > 0) is None


# ---- Key_Shared ----------------------------------------------------------------------------


@pytest.mark.parametrize("data, expected", [
    (b"", 0x00000000),
    (b"hello", 0x248BFA47),
    (b"The quick brown fox jumps over the lazy dog", 0x2E4FF723),
])
def test_murmur3_known_vectors(data, expected):
    assert murmur3_32(data) == expected


def test_sticky_key_hash_is_in_range():
    assert all(0 <= sticky_key_hash(f"k{i}".encode()) < 65536 for i in range(1000))


def test_consistent_hashing_spreads_keys_and_moves_only_the_leavers_keys():
    consumers = [C("c0"), C("c1"), C("c2")]
    ring = ConsistentHashingSelector(100)
    for c in consumers:
        ring.add_consumer(c)
    rng = random.Random(7)
    keys = [sticky_key_hash(str(rng.random()).encode()) for _ in range(10_000)]
    owners = [ring.select(k) for k in keys]
    for c in consumers:
        assert 0.15 <= owners.count(c) / len(keys) <= 0.5, c.name
    assert [ring.select(k) for k in keys] == owners  # same key -> same consumer
    ring.remove_consumer(consumers[2])
    after = [ring.select(k) for k in keys]
    for before, now in zip(owners, after):
        if before is not consumers[2]:
            assert now is before  # keys of the consumers that stayed did not move


def test_sticky_ranges_select_and_refuse_overlaps():
    sel = StickyRangesSelector()
    a, b = C("a"), C("b")
    sel.add_consumer(a, [(0, 32767)])
    sel.add_consumer(b, [(32768, 65535)])
    assert sel.select(0) is a and sel.select(40000) is b
    with pytest.raises(ConsumerAssignError, match="overlaps"):
        sel.add_consumer(C("c"), [(100, 200)])
    with pytest.raises(ConsumerAssignError, match="not within"):
        sel.add_consumer(C("d"), [(70000, 70001)])
    sel.remove_consumer(a)
    assert sel.select(5) is None


def test_recently_joined_consumer_waits_for_older_messages_to_be_acked():
    joined = RecentlyJoined()
    newcomer = C("new")
    joined.add(newcomer, (3, 10))  # the read position when it joined
    assert joined.allowed(newcomer, (3, 9), mark_delete_position=(3, 2))  # older than its arrival: fine
    assert not joined.allowed(newcomer, (3, 10), mark_delete_position=(3, 2))
    assert joined.allowed(newcomer, (3, 12), mark_delete_position=(3, 9))  # everything before it acked
    joined.prune((3, 9))
    assert len(joined) == 0


# ---- redelivery, pending acks, delayed delivery -------------------------------------------


def test_redelivery_counts_and_replay_order():
    tracker, queue = RedeliveryTracker(), ReplayQueue()
    for p in [(1, 5), (1, 2), (1, 5)]:
        tracker.increment(p)
        queue.add(p)
    assert tracker.count_for((1, 5)) == 2 and tracker.count_for((1, 2)) == 1 and tracker.count_for((9, 9)) == 0
    assert len(queue) == 2 and queue.pop(5) == [(1, 2), (1, 5)]
    tracker.remove_up_to((1, 4))
    assert tracker.count_for((1, 2)) == 0 and tracker.count_for((1, 5)) == 2


def test_pending_acks_count_messages_and_batch_indexes():
    pending = PendingAcks()
    pending.add((1, 0), 1)
    pending.add((1, 1), 10)
    pending.add((1, 2), 5)
    assert pending.unacked_messages == 16
    pending.ack_batch_indexes((1, 1), {0, 1, 2})
    assert pending.unacked_messages == 13
    pending.ack_batch_indexes((1, 1), set(range(10)))
    assert (1, 1) not in pending and pending.unacked_messages == 6
    assert pending.remove_up_to((1, 0)) == [(1, 0)]
    assert pending.release_all() == [(1, 2)] and pending.unacked_messages == 0


def test_delayed_delivery_releases_due_positions_in_order():
    now = [1_000]
    tracker = DelayedDeliveryTracker(clock=lambda: now[0])
    assert not tracker.add((1, 0), 900)  # already due: not held
    assert tracker.add((1, 3), 2_000)
    assert tracker.add((1, 1), 2_000)
    assert tracker.add((1, 2), 5_000)
    assert tracker.next_delivery_ms() == 2_000
    assert tracker.due() == []
    now[0] = 2_000
    assert tracker.due() == [(1, 1), (1, 3)]
    assert len(tracker) == 1 and tracker.contains((1, 2))
