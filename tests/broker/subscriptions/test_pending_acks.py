"""Per-consumer pending acks: message accounting with batches, batch-index acks, cumulative acks, release."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.subscriptions.pending_acks import PendingAck, PendingAcks
from storage.managed_ledger import Position


def apply(pending, ops):
    for op, *args in ops:
        if op == "add":
            pending.add(*args)
        elif op == "ack":
            pending.remove(*args)
        elif op == "cum":
            pending.remove_up_to(*args)
        elif op == "idx":
            pending.ack_batch_indexes(*args)


@pytest.mark.parametrize("ops, unacked, positions", [
    ([("add", (1, 0), 1), ("add", (1, 1), 10), ("add", (1, 2), 5)], 16, [(1, 0), (1, 1), (1, 2)]),
    ([("add", (1, 0), 3), ("add", (1, 0), 3)], 3, [(1, 0)]),                        # sent twice, counted once
    ([("add", (1, 0), 3), ("ack", (1, 0))], 0, []),
    ([("add", (1, 0), 3), ("ack", (1, 9))], 3, [(1, 0)]),                           # unknown ack: nothing
    ([("add", (1, 1), 10), ("idx", (1, 1), {0, 1, 2})], 7, [(1, 1)]),
    ([("add", (1, 1), 10), ("idx", (1, 1), {0, 1}), ("idx", (1, 1), {1, 2})], 7, [(1, 1)]),  # no double count
    ([("add", (1, 1), 4), ("idx", (1, 1), {0, 1, 7, -1})], 2, [(1, 1)]),             # out-of-range ignored
    ([("add", (1, 1), 4), ("idx", (1, 1), {0, 1}), ("idx", (1, 1), {2, 3})], 0, []),  # fully acked -> gone
    ([("add", (1, 1), 4), ("idx", (1, 1), {0}), ("ack", (1, 1))], 0, []),            # whole ack after partial
    ([("add", (1, 0), 1), ("add", (2, 0), 2), ("add", (1, 5), 3), ("cum", (1, 5))], 2, [(2, 0)]),
    ([("add", (1, 0), 1), ("add", (1, 3), 2), ("cum", (1, 2))], 2, [(1, 3)]),
    ([("add", (1, 3), 5, 0, {0, 1})], 3, [(1, 3)]),                                 # partly acked batch resent
])
def test_pending_acks_accounting(ops, unacked, positions):
    pending = PendingAcks()
    apply(pending, ops)
    assert pending.unacked_messages == unacked
    assert pending.positions() == positions and len(pending) == len(positions)


def test_ack_batch_indexes_reports_completion():
    pending = PendingAcks()
    pending.add((1, 0), 2, key_hash=77)
    assert pending.get((1, 0)) == PendingAck(2, 77, frozenset())
    assert pending.ack_batch_indexes((1, 0), [0]) is False
    assert pending.get((1, 0)).unacked == 1 and pending.key_hash((1, 0)) == 77 and pending.batch_size((1, 0)) == 2
    assert pending.ack_batch_indexes((1, 0), [1]) is True
    assert (1, 0) not in pending and pending.get((1, 0)) is None
    assert pending.ack_batch_indexes((1, 0), [1]) is False


def test_release_and_release_all_return_positions_in_order():
    pending = PendingAcks()
    for p, n in [((2, 1), 1), ((1, 4), 3), ((1, 9), 2), ((2, 0), 5)]:
        pending.add(Position(*p), n)
    pending.ack_batch_indexes((2, 0), {0, 1})
    assert pending.unacked_messages == 1 + 3 + 2 + 3
    assert pending.release([(1, 9), (7, 7), (2, 1)]) == [(1, 9), (2, 1)]
    assert pending.unacked_messages == 6
    assert pending.release_all() == [(1, 4), (2, 0)]
    assert pending.unacked_messages == 0 and len(pending) == 0 and pending.release_all() == []


@given(st.lists(st.tuples(
    st.sampled_from(["add", "ack", "cum", "idx"]),
    st.tuples(st.integers(0, 2), st.integers(0, 4)),
    st.integers(1, 5),
    st.sets(st.integers(0, 5), max_size=3),
)))
def test_pending_acks_match_a_model(ops):
    pending, model = PendingAcks(), {}  # position -> (batch_size, acked)
    for op, position, size, indexes in ops:
        if op == "add":
            pending.add(position, size)
            model.setdefault(position, (size, set()))
        elif op == "ack":
            pending.remove(position)
            model.pop(position, None)
        elif op == "cum":
            assert pending.remove_up_to(position) == sorted(p for p in model if p <= position)
            model = {p: v for p, v in model.items() if p > position}
        elif position in model:
            size_, acked = model[position]
            acked |= {i for i in indexes if i < size_}
            done = pending.ack_batch_indexes(position, indexes)
            assert done is (len(acked) == size_)
            if done:
                del model[position]
        assert pending.unacked_messages == sum(s - len(a) for s, a in model.values())
        assert pending.positions() == sorted(model)
