"""Ledger storage: caches, flush, digest-checked reads, compaction (no event loop needed)."""

from __future__ import annotations

import pytest

from storage import digest
from storage.bookie.config import BookieConfig
from storage.bookie.entrylog import encode_record, entry_log_name
from storage.bookie.ledger_storage import LedgerStorage, ReadCache, tree_size_bytes
from storage.errors import EntryCorruptedOnDiskError, NoSuchEntryError


def make_config(tmp_path, **changes) -> BookieConfig:
    return BookieConfig(metadata_store_url="mem://", data_dir=tmp_path, **changes)


def entry(ledger_id: int, entry_id: int, size: int = 200) -> bytes:
    return digest.package(ledger_id, entry_id, entry_id - 1, 0, bytes([entry_id % 251]) * size)


def add(storage: LedgerStorage, ledger_id: int, entries) -> None:
    for e in entries:
        storage.put(ledger_id, e, entry(ledger_id, e), e - 1)


def flush(storage: LedgerStorage) -> None:
    snapshot = storage.begin_flush()
    storage.flush(snapshot)
    storage.end_flush(snapshot, True)


@pytest.fixture
def storage(tmp_path):
    s = LedgerStorage(make_config(tmp_path))
    yield s
    s.close()


def test_write_cache_is_readable_and_tracks_state(storage):
    add(storage, 1, range(3))
    assert storage.cached(1, 2) == (entry(1, 2), True)
    assert storage.cached(1, 3) == (None, False)
    assert storage.states[1].last_entry_id == 2 and storage.states[1].lac == 1
    assert storage.write_cache_bytes == 3 * len(entry(1, 0))


def test_flushing_entries_stay_readable_until_flush_ends(storage):
    add(storage, 1, range(3))
    snapshot = storage.begin_flush()
    assert storage.write_cache_bytes == 0
    assert storage.cached(1, 1) == (entry(1, 1), True)  # from the flushing cache
    storage.flush(snapshot)
    storage.end_flush(snapshot, True)
    assert storage.cached(1, 1) == (None, False)
    assert storage.read(1, 1) == entry(1, 1)


def test_failed_flush_folds_entries_back(storage):
    add(storage, 1, range(3))
    snapshot = storage.begin_flush()
    storage.end_flush(snapshot, False)
    assert storage.cached(1, 0) == (entry(1, 0), True)
    assert storage.has_unflushed
    flush(storage)
    assert storage.read(1, 2) == entry(1, 2)


def test_write_cache_full(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, write_cache_max_bytes=1000))
    add(storage, 1, range(4))
    assert not storage.write_cache_full
    add(storage, 1, range(4, 5))
    assert storage.write_cache_full
    storage.close()


def test_read_cache_is_lru_bounded_in_bytes():
    cache = ReadCache(300)
    for e in range(3):
        cache.put((1, e), b"x" * 100)
    assert cache.get((1, 0)) is not None  # now most recently used
    cache.put((1, 3), b"y" * 100)
    assert cache.get((1, 1)) is None  # the least recently used went
    assert cache.get((1, 0)) is not None and cache.bytes == 300
    cache.put((2, 0), b"z" * 1000)  # larger than the whole cache: not cached
    assert cache.get((2, 0)) is None
    cache.drop_ledger(1)
    assert cache.bytes == 0


def test_states_and_entries_survive_reopen(tmp_path):
    storage = LedgerStorage(make_config(tmp_path))
    add(storage, 4, range(10))
    storage.states[4].fenced = True
    storage.states[4].master_key = b"key"
    storage.state_changed(4)
    flush(storage)
    storage.close()
    storage = LedgerStorage(make_config(tmp_path))
    assert storage.states[4].fenced and storage.states[4].master_key == b"key"
    assert storage.states[4].last_entry_id == 9
    assert storage.read(4, 9) == entry(4, 9)
    with pytest.raises(NoSuchEntryError):
        storage.read(4, 10)
    storage.close()


def flip_byte_of(storage: LedgerStorage, ledger_id: int, entry_id: int, at: int) -> None:
    loc = storage.index.get(ledger_id, entry_id)
    path = storage.config.ledger_dir / entry_log_name(loc.log_id)
    with open(path, "r+b") as fh:
        fh.seek(loc.offset + at)
        byte = fh.read(1)
        fh.seek(loc.offset + at)
        fh.write(bytes([byte[0] ^ 0x10]))


@pytest.mark.parametrize("at", [0, 12, 33, 40, 150])
def test_bit_rot_is_reported_not_returned(storage, at):
    add(storage, 1, range(3))
    flush(storage)
    flip_byte_of(storage, 1, 1, at)
    with pytest.raises(EntryCorruptedOnDiskError):
        storage.read(1, 1)
    assert storage.read(1, 0) == entry(1, 0)
    assert storage.read_consecutive(1, 0, 2, 10**6, True) == [entry(1, 0)]  # stops at the corrupt one
    with pytest.raises(EntryCorruptedOnDiskError):
        storage.read_consecutive(1, 1, 2, 10**6, True)


def test_truncated_entry_log_is_reported_as_corruption(storage):
    add(storage, 1, range(2))
    flush(storage)
    loc = storage.index.get(1, 1)
    with open(storage.config.ledger_dir / entry_log_name(loc.log_id), "r+b") as fh:
        fh.truncate(loc.offset + 10)
    with pytest.raises(EntryCorruptedOnDiskError):
        storage.read(1, 1)


def test_read_consecutive_respects_gap_last_and_budget(storage):
    add(storage, 1, [0, 1, 2, 3, 5])
    flush(storage)
    size = len(entry(1, 0))
    assert len(storage.read_consecutive(1, 0, 100, 10**6, True)) == 4
    assert len(storage.read_consecutive(1, 0, 1, 10**6, True)) == 2
    assert len(storage.read_consecutive(1, 0, 100, 2 * size + 1, True)) == 2
    assert len(storage.read_consecutive(1, 0, 100, 1, True)) == 1  # at least one
    assert storage.read_consecutive(1, 0, 100, 1, False) == []


def ledger_dir_entry_log_bytes(storage: LedgerStorage) -> int:
    return sum(storage.entry_logger.file_size(i) for i in storage.entry_logger.log_ids())


def test_compaction_rewrites_sparse_logs_and_deletes_dead_ones(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, entry_log_max_file_size_bytes=8 * 1024))
    # Flushes sort by ledger, so flush small rounds to make every log hold all three ledgers.
    for first in range(0, 60, 3):
        for ledger_id in (1, 2, 3):
            add(storage, ledger_id, range(first, first + 3))
        flush(storage)
    before = ledger_dir_entry_log_bytes(storage)
    old_logs = storage.entry_logger.log_ids()
    assert len(old_logs) > 3
    for ledger_id in (1, 2):
        storage.forget_ledger(ledger_id)
        storage.delete_ledger_on_disk(ledger_id)

    # A threshold of 0 deletes only wholly dead logs: there are none.
    assert storage.compact(0.0).reclaimed_bytes == 0
    current = storage.entry_logger.current_log_id
    result = storage.compact(0.5)
    after = ledger_dir_entry_log_bytes(storage)
    assert result.skipped_logs == []
    assert set(result.rewritten_logs) | set(result.deleted_logs) == set(old_logs) - {current}
    assert result.rewritten_logs
    assert before - after == result.reclaimed_bytes > before // 2
    assert all(storage.read(3, e) == entry(3, e) for e in range(60))
    assert not any((tmp_path / "ledgers" / entry_log_name(i)).exists() for i in result.rewritten_logs)

    # The log that was current during the first pass is fair game now; after
    # it, everything left is live and a further pass finds nothing to do.
    second = storage.compact(0.5)
    assert second.rewritten_logs + second.deleted_logs == [current]
    assert storage.compact(0.5).reclaimed_bytes == 0
    assert all(storage.read(3, e) == entry(3, e) for e in range(60))
    storage.close()


def test_compaction_deletes_wholly_dead_log_at_zero_threshold(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, entry_log_max_file_size_bytes=4 * 1024))
    add(storage, 1, range(30))
    add(storage, 2, range(30))  # sorted flush: ledger 1's logs hold only ledger 1
    flush(storage)
    storage.forget_ledger(1)
    storage.delete_ledger_on_disk(1)
    result = storage.compact(0.0)
    assert result.deleted_logs and not result.rewritten_logs
    assert all(storage.read(2, e) == entry(2, e) for e in range(30))
    storage.close()


def test_compaction_keeps_a_log_whose_scan_misses_live_bytes(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, entry_log_max_file_size_bytes=4 * 1024))
    add(storage, 1, range(30))
    add(storage, 2, range(30))
    flush(storage)
    storage.forget_ledger(1)
    storage.delete_ledger_on_disk(1)
    # Corrupt the length field of the first record of a log holding ledger 2:
    # the scan can no longer walk the file, so it must not be deleted.
    victim = storage.index.get(2, 29).log_id
    if victim == storage.entry_logger.current_log_id:
        storage.entry_logger._roll(victim + 1)
    path = tmp_path / "ledgers" / entry_log_name(victim)
    with open(path, "r+b") as fh:
        fh.seek(8)
        fh.write(b"\xff\xff\xff\xff")
    result = storage.compact(1.0)
    assert victim in result.skipped_logs
    assert path.exists()
    assert storage.read(2, 29) == entry(2, 29)
    storage.close()


def test_reads_follow_entries_moved_by_compaction(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, entry_log_max_file_size_bytes=4 * 1024))
    for first in range(0, 40, 4):
        add(storage, 1, range(first, first + 4))
        add(storage, 2, range(first, first + 4))
        flush(storage)
    old = storage.index.get(2, 0)
    storage.forget_ledger(1)
    storage.delete_ledger_on_disk(1)
    storage.compact(1.0)
    new = storage.index.get(2, 0)
    assert new.log_id != old.log_id
    assert storage.read(2, 0) == entry(2, 0)


def test_tree_size_counts_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 10)
    (tmp_path / "g").write_bytes(b"y" * 5)
    assert tree_size_bytes(tmp_path) == 15


def test_entry_log_record_overhead_is_accounted(storage):
    # The usage rows count whole records, so a log's live fraction is near 1 when all is live.
    add(storage, 1, range(10))
    flush(storage)
    log_id = storage.index.get(1, 0).log_id
    usage = storage.index.log_usage()[log_id]
    assert usage == 10 * len(encode_record(1, 0, entry(1, 0)))
