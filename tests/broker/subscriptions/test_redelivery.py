"""Redelivery counts and the replay queue."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.subscriptions.redelivery import RedeliveryTracker, ReplayQueue
from storage.managed_ledger import Position


@pytest.mark.parametrize("ops, expected", [
    ([("inc", (1, 5)), ("inc", (1, 5)), ("inc", (1, 2))], {(1, 5): 2, (1, 2): 1, (9, 9): 0}),
    ([("inc", (1, 5)), ("ack", (1, 5)), ("inc", (1, 5))], {(1, 5): 1}),       # an ack starts over
    ([("inc", (1, 1)), ("inc", (1, 4)), ("inc", (2, 0)), ("cum", (1, 4))], {(1, 1): 0, (1, 4): 0, (2, 0): 1}),
    ([("inc", (1, 1)), ("clear", None)], {(1, 1): 0}),
    ([("ack", (7, 7))], {(7, 7): 0}),                                          # acking the unknown is harmless
])
def test_redelivery_counts(ops, expected):
    tracker = RedeliveryTracker()
    for op, position in ops:
        {"inc": tracker.increment, "ack": tracker.remove, "cum": tracker.remove_up_to,
         "clear": lambda _: tracker.clear()}[op](position)
    assert {p: tracker.count_for(p) for p in expected} == expected


def test_increment_returns_the_count_and_accepts_named_positions():
    tracker = RedeliveryTracker()
    assert tracker.increment(Position(3, 4)) == 1
    assert tracker.increment((3, 4)) == 2
    assert tracker.count_for(Position(3, 4)) == 2 and (3, 4) in tracker and len(tracker) == 1


def test_replay_queue_pops_in_position_order_without_duplicates():
    queue = ReplayQueue()
    assert queue.add_many([(2, 0), (1, 7), (1, 2), (1, 7)]) == 3
    assert not queue.add(Position(1, 2))
    assert len(queue) == 3 and (1, 7) in queue
    assert queue.peek(2) == [(1, 2), (1, 7)]
    assert queue.pop(2) == [(1, 2), (1, 7)]
    assert queue.pop(10) == [(2, 0)] and queue.pop(1) == []


def test_replay_queue_discards_acked_positions():
    queue = ReplayQueue()
    queue.add_many([(1, i) for i in range(6)])
    assert queue.discard((1, 3)) and not queue.discard((1, 3))
    assert queue.discard_up_to((1, 1)) == [(1, 0), (1, 1)]
    assert list(queue) == [(1, 2), (1, 4), (1, 5)]


def test_replay_queue_tracks_key_hashes_of_waiting_positions():
    queue = ReplayQueue()
    queue.add_many([(1, 0), (1, 1), (1, 2)], [7, 7, 9])
    queue.add((1, 3))  # key unknown (e.g. released by a consumer that left)
    assert queue.key_hashes() == {7, 9}
    queue.discard((1, 0))
    assert queue.holds_key_hash(7)          # (1, 1) still waits for key 7
    assert queue.pop(2) == [(1, 1), (1, 2)]
    assert not queue.holds_key_hash(7) and not queue.holds_key_hash(9)
    queue.add((1, 3), key_hash=4)           # learning the hash later
    assert queue.holds_key_hash(4)
    queue.discard_up_to((5, 0))
    assert queue.key_hashes() == set() and len(queue) == 0
    with pytest.raises(ValueError):
        queue.add_many([(1, 0)], [1, 2])


@given(st.lists(st.tuples(st.sampled_from(["add", "pop", "discard", "upto"]),
                          st.tuples(st.integers(0, 3), st.integers(0, 5)), st.integers(0, 4))))
def test_replay_queue_is_a_sorted_set(ops):
    queue, model = ReplayQueue(), set()
    for op, position, n in ops:
        if op == "add":
            assert queue.add(position) is (position not in model)
            model.add(position)
        elif op == "pop":
            expected = sorted(model)[:n]
            assert queue.pop(n) == expected
            model -= set(expected)
        elif op == "discard":
            assert queue.discard(position) is (position in model)
            model.discard(position)
        else:
            assert queue.discard_up_to(position) == sorted(p for p in model if p <= position)
            model = {p for p in model if p > position}
        assert list(queue) == sorted(model)


def test_replay_queue_lists_key_hashes_and_the_oldest_waiting_entry_of_each_key():
    queue = ReplayQueue()
    queue.add((1, 5), 7)
    queue.add((1, 2), 9)
    queue.add((1, 3))  # given back by a consumer: key unknown
    queue.add((1, 1), 7)
    assert queue.items() == [((1, 1), 7), ((1, 2), 9), ((1, 3), None), ((1, 5), 7)]
    assert queue.earliest_by_key_hash() == {7: (1, 1), 9: (1, 2)}
    queue.discard((1, 1))
    assert queue.earliest_by_key_hash() == {7: (1, 5), 9: (1, 2)}
