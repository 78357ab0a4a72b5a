"""AckRanges against a naive set of positions: tables for the edge cases, hypothesis for the rest."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CursorStateCorruptError
from storage.managed_ledger.ack_ranges import AckRanges


def ranges_of(model: set[tuple[int, int]]) -> list[tuple[int, int, int]]:
    out: list[list[int]] = []
    for ledger_id, entry_id in sorted(model):
        if out and out[-1][0] == ledger_id and out[-1][2] == entry_id - 1:
            out[-1][2] = entry_id
        else:
            out.append([ledger_id, entry_id, entry_id])
    return [tuple(r) for r in out]


def check(acks: AckRanges, model: set[tuple[int, int]]) -> None:
    assert list(acks.ranges()) == ranges_of(model)
    assert len(acks) == len(model)
    assert acks.range_count == len(ranges_of(model))
    for ledger_id, entry_id in model:
        assert acks.contains(ledger_id, entry_id)
        assert not acks.contains(ledger_id, entry_id + 1) or (ledger_id, entry_id + 1) in model
    restored = AckRanges.decode(acks.encode())
    assert list(restored.ranges()) == ranges_of(model) and len(restored) == len(model)


@pytest.mark.parametrize("adds, expected", [
    ([(1, 5)], [(1, 5, 5)]),
    ([(1, 5), (1, 6)], [(1, 5, 6)]),  # extends the run to the right
    ([(1, 6), (1, 5)], [(1, 5, 6)]),  # extends it to the left
    ([(1, 4), (1, 6), (1, 5)], [(1, 4, 6)]),  # fills the hole: two runs merge
    ([(1, 4), (1, 8), (1, 6)], [(1, 4, 4), (1, 6, 6), (1, 8, 8)]),
    ([(2, 0), (1, 0)], [(1, 0, 0), (2, 0, 0)]),  # ledgers stay ordered
    ([(1, 0), (1, 0)], [(1, 0, 0)]),
])
def test_adds_merge_runs(adds, expected):
    acks = AckRanges()
    for ledger_id, entry_id in adds:
        acks.add(ledger_id, entry_id)
    assert list(acks.ranges()) == expected
    assert len(acks) == len(set(adds))


@pytest.mark.parametrize("cut, expected", [
    ((1, 3), [(1, 5, 7), (1, 9, 9), (2, 0, 1)]),  # before every run of the ledger
    ((1, 5), [(1, 6, 7), (1, 9, 9), (2, 0, 1)]),  # inside a run: its tail stays
    ((1, 7), [(1, 9, 9), (2, 0, 1)]),  # the last entry of a run
    ((1, 100), [(2, 0, 1)]),
    ((2, 0), [(2, 1, 1)]),  # whole earlier ledgers go
    ((3, 0), []),
])
def test_remove_up_to(cut, expected):
    acks = AckRanges()
    for ledger_id, first, last in [(1, 5, 7), (1, 9, 9), (2, 0, 1)]:
        acks.add_range(ledger_id, first, last)
    acks.remove_up_to(*cut)
    assert list(acks.ranges()) == expected
    assert len(acks) == sum(last - first + 1 for _, first, last in expected)


def test_unacked_runs_skip_acknowledged_entries():
    acks = AckRanges()
    acks.add_range(1, 2, 4)
    acks.add_range(1, 7, 7)
    assert list(acks.unacked_runs(1, 0, 10)) == [(0, 2), (5, 7), (8, 10)]
    assert list(acks.unacked_runs(1, 3, 7)) == [(5, 7)]
    assert list(acks.unacked_runs(1, 2, 5)) == []
    assert list(acks.unacked_runs(9, 0, 3)) == [(0, 3)]


def test_pop_run_at_only_takes_the_first_run():
    acks = AckRanges()
    acks.add_range(1, 3, 6)
    acks.add(1, 9)
    assert acks.pop_run_at(1, 9) is None
    assert acks.pop_run_at(1, 3) == 6
    assert list(acks.ranges()) == [(1, 9, 9)] and len(acks) == 1


@pytest.mark.parametrize("data", [
    b"", b"XXXX\x00\x00\x00\x00", AckRanges().encode() + b"x",
    b"MAR1\x01\x00\x00\x00" + b"\x01" * 10,
])
def test_decode_refuses_malformed_input(data):
    with pytest.raises(CursorStateCorruptError):
        AckRanges.decode(data)


def test_encoded_runs_are_compact():
    acks = AckRanges()
    for entry_id in range(0, 100_000, 2):  # 50,000 holes in one ledger
        acks.add(7, entry_id)
    encoded = acks.encode()
    assert len(encoded) < 2_000, "run lengths of 1 compress to almost nothing"
    assert list(AckRanges.decode(encoded).ranges()) == list(acks.ranges())


positions = st.tuples(st.integers(0, 3), st.integers(0, 40))
operations = st.lists(st.one_of(
    st.tuples(st.just("add"), positions),
    st.tuples(st.just("range"), st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 6))),
    st.tuples(st.just("cut"), positions),
    st.tuples(st.just("pop"), positions),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_behaves_like_a_set_of_positions(ops):
    acks, model = AckRanges(), set()
    for op, arg in ops:
        if op == "add":
            assert acks.add(*arg) == (arg not in model)
            model.add(arg)
        elif op == "range":
            ledger_id, first, length = arg
            wanted = {(ledger_id, e) for e in range(first, first + length)}
            assert acks.add_range(ledger_id, first, first + length - 1) == len(wanted - model)
            model |= wanted
        elif op == "cut":
            acks.remove_up_to(*arg)
            model = {p for p in model if p > arg}
        else:
            ledger_id, entry_id = arg
            first_run = next((r for r in ranges_of(model) if r[0] == ledger_id), None)
            expected = first_run[2] if first_run and first_run[1] == entry_id else None
            assert acks.pop_run_at(ledger_id, entry_id) == expected
            if expected is not None:
                model -= {(ledger_id, e) for e in range(entry_id, expected + 1)}
        for ledger_id in range(4):
            want = []
            for e in range(0, 50):
                if (ledger_id, e) not in model:
                    if want and want[-1][1] == e:
                        want[-1][1] = e + 1
                    else:
                        want.append([e, e + 1])
            assert [list(r) for r in acks.unacked_runs(ledger_id, 0, 50)] == want
    check(acks, model)


@pytest.mark.parametrize("positions, expected", [
    ([(1, 0), (1, 2), (1, 20)], [(1, 0), (1, 1), (1, 2), (1, 20)]),  # a gap of 17 > 16 stays
    ([(1, 0), (2, 1)], [(1, 0), (2, 1)]),  # never across ledgers
    ([], []),
])
def test_reads_fill_small_gaps_between_wanted_entries(positions, expected):
    from storage.managed_ledger.cursor import fill_small_gaps
    from storage.managed_ledger.position import Position

    assert fill_small_gaps([Position(*p) for p in positions], 16) == [Position(*p) for p in expected]
