"""Failover/Exclusive: which consumer is active, and who hears ACTIVE_CONSUMER_CHANGE."""

from __future__ import annotations

import pytest

from broker.subscriptions import ConsumerRef
from broker.subscriptions.single_active import choose_active_consumer, elect_active_consumer, failover_order


def refs(*specs) -> list[ConsumerRef]:
    """'name' or ('name', priority_level) -> ConsumerRefs with ids in connection order."""
    out = []
    for i, spec in enumerate(specs):
        name, level = (spec, 0) if isinstance(spec, str) else spec
        out.append(ConsumerRef(i, name, level))
    return out


def name_of(c):
    return None if c is None else c.name


@pytest.mark.parametrize("specs, partition, active", [
    ((), -1, None),
    ((), 3, None),
    (("a",), -1, "a"),
    (("b", "a"), -1, "a"),                      # by name, not connection order
    (("a", "b", "c"), -1, "a"),
    ((("a", 1), ("b", 0)), -1, "b"),            # priority level beats the name
    ((("a", 0), ("b", 5)), -1, "a"),
    (("a", "b", "c"), 0, "a"),
    (("a", "b", "c"), 1, "b"),
    (("a", "b", "c"), 2, "c"),
    (("a", "b", "c"), 3, "a"),                   # partitions rotate over the consumers
    (("c", "a", "b"), 5, "c"),
    ((("a", 2), ("b", 1), ("c", 1)), 0, "b"),    # only the best level competes
    ((("a", 2), ("b", 1), ("c", 1)), 1, "c"),
    ((("a", 2), ("b", 1), ("c", 1)), 2, "b"),
    ((("z", 0), ("a", 1), ("b", 1)), 7, "z"),    # one consumer at the best level takes every partition
    (("B", "a"), -1, "B"),                      # Java String order: upper case before lower case
    (("\uffff", "\U00010000"), -1, "\U00010000"),  # UTF-16 code units: a surrogate pair sorts before U+FFFF
])
def test_active_consumer(specs, partition, active):
    assert name_of(choose_active_consumer(refs(*specs), partition)) == active


def test_namesakes_keep_connection_order():
    first, second = ConsumerRef(1, "same"), ConsumerRef(2, "same")
    assert choose_active_consumer([first, second], -1) is first
    assert choose_active_consumer([second, first], -1) is second
    assert choose_active_consumer([first, second], 1) is second


def test_failover_order_is_stable():
    cs = refs(("b", 1), "x", ("a", 1), "x")
    assert [(c.name, c.consumer_id) for c in failover_order(cs)] == [("x", 1), ("x", 3), ("a", 2), ("b", 0)]


def test_hash_ring_placement_for_non_partitioned_topics_spreads_and_is_stable():
    cs = refs("c0", "c1", "c2")
    topics = [f"persistent://t/ns/topic-{i}" for i in range(300)]
    chosen = [choose_active_consumer(cs, -1, topic_name=t) for t in topics]
    assert chosen == [choose_active_consumer(list(reversed(cs)), -1, topic_name=t) for t in topics]
    for c in cs:
        assert chosen.count(c) >= 30, c.name  # every consumer is active for some topics
    # a worse-priority newcomer never takes a topic over
    with_low = cs + [ConsumerRef(9, "low", 1)]
    assert [choose_active_consumer(with_low, -1, topic_name=t) for t in topics] == chosen


def test_hash_ring_ignored_for_partitions():
    cs = refs("a", "b", "c")
    assert choose_active_consumer(cs, 4, topic_name="persistent://t/ns/x-partition-4").name == "b"


@pytest.mark.parametrize("before, after, previous, joined, failover, active, changed, notify", [
    # first consumer: it becomes active and hears so
    ((), ("b",), None, "b", True, "b", True, ("b",)),
    # a newcomer sorting after the active consumer: only the newcomer is told who is active
    (("a",), ("a", "b"), "a", "b", True, "a", False, ("b",)),
    # a newcomer sorting first takes over: everybody hears
    (("b",), ("b", "a"), "b", "a", True, "a", True, ("b", "a")),
    # the active consumer left: the next one takes over, the remaining consumers hear
    (("a", "b", "c"), ("b", "c"), "a", None, True, "b", True, ("b", "c")),
    # a passive consumer left: nothing to say
    (("a", "b"), ("a",), "a", None, True, "a", False, ()),
    # the last consumer left
    (("a",), (), "a", None, True, None, True, ()),
    # Exclusive never sends ACTIVE_CONSUMER_CHANGE
    ((), ("a",), None, "a", False, "a", True, ()),
])
def test_election_and_notifications(before, after, previous, joined, failover, active, changed, notify):
    pool = {name: ConsumerRef(name, name) for name in set(before) | set(after)}
    consumers = [pool[n] for n in after]
    result = elect_active_consumer(
        consumers, pool.get(previous), -1, joined=pool.get(joined), failover=failover)
    assert name_of(result.active) == active
    assert result.changed is changed
    assert name_of(result.previous) == previous
    assert tuple(c.name for c in result.notify) == notify


def test_election_on_a_partition_rotates_when_a_consumer_joins():
    a, b = ConsumerRef(1, "a"), ConsumerRef(2, "b")
    first = elect_active_consumer([a], None, partition_index=1, joined=a)
    assert first.active is a
    second = elect_active_consumer([a, b], first.active, partition_index=1, joined=b)
    assert second.active is b and second.changed and set(second.notify) == {a, b}
