"""LMDB index: locations, ledger states, usage accounting, persistence."""

from __future__ import annotations

import pytest

from storage.bookie.entrylog import RECORD_OVERHEAD, EntryLocation
from storage.bookie.index import LedgerIndex, LedgerDescriptor


@pytest.fixture
def index(tmp_path):
    idx = LedgerIndex(tmp_path / "index", map_size_bytes=64 * 1024 * 1024)
    yield idx
    idx.close()


def placed(ledger_id: int, entries, log_id: int = 1, length: int = 100):
    return [(ledger_id, e, EntryLocation(log_id, 1000 + e * 200, length)) for e in entries]


@pytest.mark.parametrize(
    "state",
    [
        LedgerDescriptor(),
        LedgerDescriptor(b"key", fenced=True, lac=41, last_entry_id=42),
        LedgerDescriptor(b"", fenced=False, lac=-1, last_entry_id=0),
        LedgerDescriptor(bytes(range(256)), fenced=True),
    ],
)
def test_state_codec_round_trip(state):
    assert LedgerDescriptor.decode(state.encode()) == state


def test_locations_and_states_round_trip(index):
    index.commit_flush(placed(1, range(5)), {1: LedgerDescriptor(b"k", lac=3, last_entry_id=4)})
    assert index.get(1, 3) == EntryLocation(1, 1600, 100)
    assert index.get(1, 5) is None
    assert index.get(2, 0) is None
    assert index.load_states() == {1: LedgerDescriptor(b"k", lac=3, last_entry_id=4)}
    assert index.entry_count() == 5


def test_consecutive_stops_at_gap_last_and_ledger_boundary(index):
    index.commit_flush(placed(1, [0, 1, 2, 4, 5]) + placed(2, [0, 1]), {})
    assert [e for e, _ in index.consecutive(1, 0, 100)] == [0, 1, 2]
    assert [e for e, _ in index.consecutive(1, 1, 1)] == [1]
    assert [e for e, _ in index.consecutive(1, 4, 100)] == [4, 5]  # does not run into ledger 2
    assert index.consecutive(1, 3, 100) == []
    assert index.consecutive(3, 0, 100) == []


def test_survives_reopen(tmp_path):
    idx = LedgerIndex(tmp_path / "index", map_size_bytes=64 * 1024 * 1024)
    idx.commit_flush(placed(7, range(3)), {7: LedgerDescriptor(b"k", fenced=True)})
    idx.close()
    idx = LedgerIndex(tmp_path / "index", map_size_bytes=64 * 1024 * 1024)
    assert idx.get(7, 2) == EntryLocation(1, 1400, 100)
    assert idx.load_states()[7].fenced
    idx.close()


def test_usage_counts_live_record_bytes_per_log(index):
    index.commit_flush(placed(1, range(4), log_id=1) + placed(2, range(2), log_id=1) + placed(2, [2], log_id=2), {})
    per_record = 100 + RECORD_OVERHEAD
    assert index.log_usage() == {1: 6 * per_record, 2: per_record}


def test_rewritten_entry_moves_its_bytes_to_the_new_log(index):
    index.commit_flush(placed(1, range(4), log_id=1), {})
    index.commit_flush(placed(1, [2, 3], log_id=2), {})  # e.g. recovery re-adds
    per_record = 100 + RECORD_OVERHEAD
    assert index.log_usage() == {1: 2 * per_record, 2: 2 * per_record}
    index.commit_flush(placed(1, [0, 1], log_id=3), {})
    assert index.log_usage() == {2: 2 * per_record, 3: 2 * per_record}  # log 1 fully dead: no row left


def test_delete_ledger_drops_entries_state_and_usage(index):
    index.commit_flush(placed(1, range(10)) + placed(2, range(3)), {1: LedgerDescriptor(b"a"), 2: LedgerDescriptor(b"b")})
    assert index.delete_ledger(1) == 10
    assert index.get(1, 0) is None and index.consecutive(1, 0, 10) == []
    assert index.get(2, 2) is not None
    assert set(index.load_states()) == {2}
    assert index.log_usage() == {1: 3 * (100 + RECORD_OVERHEAD)}
    assert index.delete_ledger(1) == 0  # idempotent


def test_relocate_points_entries_at_copies(index):
    index.commit_flush(placed(1, range(3), log_id=1), {})
    moves = [(1, e, EntryLocation(5, 500 + e * 200, 100)) for e in range(3)]
    index.relocate(moves, from_log=1)
    assert index.get(1, 1) == EntryLocation(5, 700, 100)
    assert index.log_usage() == {5: 3 * (100 + RECORD_OVERHEAD)}
