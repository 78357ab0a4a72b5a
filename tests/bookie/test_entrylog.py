"""Entry logs: append/flush/read, rolling, scanning, torn tails, deletion."""

from __future__ import annotations

import os
import struct

import pytest

from storage.bookie import file_writes
from storage.bookie.file_writes import REMOVING_SUFFIX
from storage.bookie.entrylog import (
    HEADER_SIZE,
    RECORD_OVERHEAD,
    EntryLocation,
    EntryLogger,
    ScannedEntry,
    encode_record,
    entry_log_name,
)


def body(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    return bytes([(ledger_id * 31 + entry_id) % 256]) * size


def test_record_layout():
    raw = encode_record(3, 4, b"abc")
    assert raw == struct.pack(">Iqq", 16 + 3, 3, 4) + b"abc"
    assert len(raw) == RECORD_OVERHEAD + 3


def test_append_flush_read(tmp_path):
    logger = EntryLogger(tmp_path, 1 << 20)
    locations = {(l, e): logger.append(l, e, body(l, e)) for l in (1, 2) for e in range(20)}
    logger.flush()
    assert locations[(1, 0)] == EntryLocation(1, HEADER_SIZE + RECORD_OVERHEAD, 100)
    for (l, e), loc in locations.items():
        assert logger.read(loc) == body(l, e)
    assert logger.file_size(1) == (tmp_path / entry_log_name(1)).stat().st_size
    logger.close()


def test_flush_makes_buffered_entries_visible_in_the_file(tmp_path):
    logger = EntryLogger(tmp_path, 1 << 20)
    loc = logger.append(1, 0, b"x" * 10)
    assert (tmp_path / entry_log_name(1)).stat().st_size == HEADER_SIZE  # still buffered
    logger.flush()
    assert (tmp_path / entry_log_name(1)).stat().st_size == loc.offset + 10
    logger.close()


def test_roll_at_max_size_and_scan(tmp_path):
    logger = EntryLogger(tmp_path, 1000)
    placed = [(e, logger.append(5, e, body(5, e))) for e in range(30)]
    logger.flush()
    log_ids = logger.log_ids()
    assert len(log_ids) >= 4 and log_ids == list(range(1, len(log_ids) + 1))
    assert all(logger.file_size(i) <= 1000 for i in log_ids)
    scanned = [(log_id, s) for log_id in log_ids for s in logger.scan(log_id)]
    assert [(log_id, s.entry_id, s.offset, s.length) for log_id, s in scanned] == [
        (loc.log_id, e, loc.offset, loc.length) for e, loc in placed
    ]
    assert all(logger.read(loc) == body(5, e) for e, loc in placed)
    logger.close()


def test_reopen_starts_a_new_log(tmp_path):
    logger = EntryLogger(tmp_path, 1 << 20)
    loc = logger.append(1, 0, b"first")
    logger.close()
    reopened = EntryLogger(tmp_path, 1 << 20)
    assert reopened.current_log_id == 2
    assert reopened.read(loc) == b"first"
    reopened.close()


def test_scan_stops_at_torn_tail(tmp_path):
    logger = EntryLogger(tmp_path, 1 << 20)
    for e in range(5):
        logger.append(1, e, body(1, e))
    logger.close()
    path = tmp_path / entry_log_name(1)
    with open(path, "ab") as fh:
        fh.write(encode_record(1, 5, body(1, 5))[:50])
    reopened = EntryLogger(tmp_path, 1 << 20)
    assert [s.entry_id for s in reopened.scan(1)] == [0, 1, 2, 3, 4]
    reopened.close()


def test_delete_closes_readers_and_removes_file(tmp_path):
    logger = EntryLogger(tmp_path, 200)
    first = logger.append(1, 0, body(1, 0))
    logger.append(1, 1, body(1, 1))  # rolls to log 2
    logger.flush()
    assert logger.read(first) == body(1, 0)  # caches a reader fd for log 1
    with pytest.raises(ValueError):
        logger.delete(logger.current_log_id)
    logger.delete(1)
    assert not (tmp_path / entry_log_name(1)).exists()
    with pytest.raises(FileNotFoundError):
        logger.read(first)
    logger.close()


def test_reader_in_flight_keeps_descriptor_until_released(tmp_path):
    logger = EntryLogger(tmp_path, 200)
    first = logger.append(1, 0, body(1, 0))
    logger.append(1, 1, body(1, 1))
    logger.flush()
    reader = logger._acquire(1)  # a read in progress on another thread
    logger.delete(1)
    assert os.pread(reader.fd, first.length, first.offset) == body(1, 0)
    logger._release(reader)
    with pytest.raises(OSError):
        os.fstat(reader.fd)  # closed by the last release
    logger.close()


def test_a_log_nobody_reads_is_shrunk_in_synced_steps_and_one_being_read_is_unlinked_whole(tmp_path, monkeypatch):
    shrunk = []
    real = file_writes.shrink_and_unlink
    monkeypatch.setattr(file_writes, "shrink_and_unlink", lambda path, *a, **k: (shrunk.append(path), real(path, *a, **k)))
    logger = EntryLogger(tmp_path, 200)
    first = logger.append(1, 0, body(1, 0))
    logger.append(1, 1, body(1, 1))  # rolls to log 2
    logger.append(1, 2, body(1, 2))  # rolls to log 3
    logger.flush()
    assert logger.read(first) == body(1, 0)  # an idle cached reader of log 1
    logger.delete(1)
    assert shrunk == [str(tmp_path / entry_log_name(1)) + REMOVING_SUFFIX]
    reader = logger._acquire(2)  # a read under way on log 2: shrinking would cut it short
    logger.delete(2)
    assert len(shrunk) == 1
    assert sorted(os.listdir(tmp_path)) == [entry_log_name(3)]
    logger._release(reader)
    logger.close()


def test_a_deletion_a_crash_interrupted_is_finished_at_the_next_start(tmp_path):
    logger = EntryLogger(tmp_path, 200)
    logger.append(1, 0, body(1, 0))
    logger.append(1, 1, body(1, 1))
    logger.close()
    (tmp_path / entry_log_name(1)).rename(tmp_path / (entry_log_name(1) + REMOVING_SUFFIX))
    reopened = EntryLogger(tmp_path, 200)
    assert not any(name.endswith(REMOVING_SUFFIX) for name in os.listdir(tmp_path))
    assert 1 not in reopened.log_ids()
    reopened.close()


def test_scanned_entry_fields(tmp_path):
    logger = EntryLogger(tmp_path, 1 << 20)
    loc = logger.append(9, 3, b"payload")
    logger.flush()
    assert list(logger.scan(1)) == [ScannedEntry(9, 3, loc.offset, 7)]
    logger.close()


def test_failed_flush_continues_in_a_fresh_log(tmp_path, monkeypatch):
    logger = EntryLogger(tmp_path, 1 << 20)
    good = logger.append(1, 0, body(1, 0))
    logger.flush()
    logger.append(1, 1, body(1, 1))
    real_fsync = os.fsync
    failures = []

    def failing_once(fd):
        if not failures:
            failures.append(fd)
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_once)
    with pytest.raises(OSError):
        logger.flush()
    monkeypatch.setattr(os, "fsync", real_fsync)
    # The caller re-appends what it could not commit; it lands in a new log.
    retried = logger.append(1, 1, body(1, 1))
    logger.flush()
    assert retried.log_id == good.log_id + 1
    assert logger.read(good) == body(1, 0)
    assert logger.read(retried) == body(1, 1)
    logger.close()


def test_large_entries_between_small_ones_read_back_and_scan(tmp_path):
    logger = EntryLogger(tmp_path, 64 << 20)
    sizes = [100, 3 << 20, 50, 1 << 20, 10, 5 << 20]  # the large ones are written in place, not buffered
    placed = [(e, logger.append(7, e, body(7, e, n))) for e, n in enumerate(sizes)]
    logger.flush()
    for e, loc in placed:
        assert logger.read(loc) == body(7, e, sizes[e])
    assert [(s.entry_id, s.offset, s.length) for s in logger.scan(1)] == [(e, loc.offset, loc.length) for e, loc in placed]
    logger.close()


def test_a_large_flush_is_written_back_in_bounded_steps(tmp_path):
    """A checkpoint's appends reach the device in steps of write_back_step_bytes, a large entry too, not all at
    the final fsync (journal fdatasyncs on the same disk would queue behind all of them)."""
    step = 256 * 1024
    seen: list[int] = []  # bytes written since the previous write-back, at each write-back

    def write_back(fd: int) -> None:
        seen.append(os.fstat(fd).st_size - sum(seen))
        file_writes.write_back(fd)  # the real call, so a failing one fails the test

    logger = EntryLogger(tmp_path, 1 << 30, write_back=write_back, write_back_step_bytes=step)
    for e in range(200):  # 200 x 10 KiB entries (through the buffer) and 4 x 600 KiB ones (written in place)
        logger.append(1, e, body(1, e, 10 * 1024 if e % 50 else 600 * 1024))
    logger.flush()
    total = logger.file_size(1)
    # never more than one step on its way to the device, the 600 KiB entries included (the first write-back also
    # carries the log's header, written when the log was made)
    assert set(seen[1:]) == {step} and step < seen[0] <= step + 64
    assert len(seen) == total // step  # and every full step was written back
    logger.close()


def test_write_back_exists_here():
    assert file_writes.write_back is not None  # Linux/glibc: the development and CI machines
