"""Tier 2: the bookie core API over real files -- rules, durability, crashes, compaction."""

from __future__ import annotations

import asyncio
import os
import textwrap
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from storage import digest
from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.bookie.entrylog import entry_log_name
from storage.bookie.faults import JournalFaults
from storage.bookie.index import LedgerIndex
from storage.bookie.journal import journal_file_name, list_journal_files, read_mark
from storage.errors import (
    BookieInternalError,
    BookieStartupError,
    DigestMismatchError,
    EntryCorruptedOnDiskError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from storage.protocol import LAST_ENTRY
from storage.testing.waiting import wait_until_async
from tests.bookie.support import kill_9_after_acks

DEADLINE_S = 10.0
KEY = b"master-key"
NEVER_MS = 3_600_000  # no periodic checkpoint during the test


def make_config(tmp_path: Path, **changes) -> BookieConfig:
    changes.setdefault("flush_interval_ms", NEVER_MS)
    return BookieConfig(metadata_store_url="mem://", data_dir=tmp_path, **changes)


def entry(ledger_id: int, entry_id: int, size: int = 100, lac: int | None = None) -> bytes:
    pattern = b"%d:%d|" % (ledger_id, entry_id)
    payload = (pattern * (size // len(pattern) + 1))[:size]
    return digest.package(ledger_id, entry_id, entry_id - 1 if lac is None else lac, 0, payload)


async def add_all(bookie: Bookie, ledger_id: int, entries, key: bytes = KEY, size: int = 100) -> None:
    await asyncio.wait_for(
        asyncio.gather(*(bookie.add_entry(ledger_id, e, entry(ledger_id, e, size), key, False) for e in entries)),
        DEADLINE_S,
    )


@pytest.fixture
async def bookie(tmp_path):
    b = await Bookie.open(make_config(tmp_path))
    yield b
    await b.close()


# ---- adds and reads ----------------------------------------------------------


async def test_add_then_read(bookie):
    await add_all(bookie, 1, range(5))
    assert await bookie.read_entry(1, 3) == entry(1, 3)
    assert await bookie.read_entry(1, LAST_ENTRY) == entry(1, 4)
    assert bookie.read_lac(1) == 3
    assert bookie.has_ledger(1) and not bookie.has_ledger(2)
    assert bookie.ledger_ids() == [1]


async def test_unknown_ledger_and_missing_entry(bookie):
    with pytest.raises(NoSuchLedgerError):
        await bookie.read_entry(9, 0)
    with pytest.raises(NoSuchLedgerError):
        bookie.read_lac(9)
    with pytest.raises(NoSuchLedgerError):
        await bookie.read_range(9, 0, 5, 1 << 20)
    await add_all(bookie, 1, [0, 1, 3])
    for missing in (2, 4, 100, -5):
        with pytest.raises(NoSuchEntryError):
            await bookie.read_entry(1, missing)


async def test_last_entry_and_lac_on_a_fenced_empty_ledger(bookie):
    await bookie.fence(3, KEY)
    with pytest.raises(NoSuchEntryError):
        await bookie.read_entry(3, LAST_ENTRY)
    assert bookie.read_lac(3) == -1


async def test_lac_is_the_maximum_seen(bookie):
    await bookie.add_entry(1, 0, entry(1, 0, lac=-1), KEY, False)
    await bookie.add_entry(1, 2, entry(1, 2, lac=1), KEY, False)
    await bookie.add_entry(1, 1, entry(1, 1, lac=0), KEY, False)  # arrives late
    assert bookie.read_lac(1) == 1
    assert await bookie.read_entry(1, LAST_ENTRY) == entry(1, 2, lac=1)


async def test_add_is_acknowledged_only_after_journal_fsync(tmp_path):
    entered, release = threading.Event(), threading.Event()
    holding = threading.Event()

    def fsync(fd: int) -> None:
        if holding.is_set():
            entered.set()
            if not release.wait(DEADLINE_S):
                raise OSError("test never released the fsync")
        os.fdatasync(fd)

    b = await Bookie.open(make_config(tmp_path), fsync=fsync)
    holding.set()
    add = asyncio.ensure_future(b.add_entry(1, 0, entry(1, 0), KEY, False))
    if not await asyncio.to_thread(entered.wait, DEADLINE_S):
        raise TimeoutError("add never reached the journal fsync")
    assert not add.done()
    with pytest.raises(NoSuchEntryError):  # not readable before it is durable
        await b.read_entry(1, 0)
    release.set()
    await asyncio.wait_for(add, DEADLINE_S)
    assert await b.read_entry(1, 0) == entry(1, 0)
    await b.close()


async def test_fence_returns_only_after_adds_queued_before_it_and_refencing_journals_nothing(tmp_path):
    faults = JournalFaults()
    b = await Bookie.open(make_config(tmp_path), fsync=faults)
    await add_all(b, 1, [0])
    hold = faults.hold_next_fsync()
    add = asyncio.ensure_future(b.add_entry(1, 1, entry(1, 1), KEY, False))
    await asyncio.wait_for(hold.reached, DEADLINE_S)  # entry 1 is written, not yet synced
    seen_lac = {}
    first, second = asyncio.ensure_future(b.fence(1, KEY)), asyncio.ensure_future(b.fence(1, KEY))
    for name, fut in (("first", first), ("second", second)):
        fut.add_done_callback(lambda _f, name=name: seen_lac.setdefault(name, b.read_lac(1)))
    await asyncio.sleep(0)  # one loop turn: each fence runs its first step, which raises the flag
    with pytest.raises(NoSuchEntryError):  # a plain read answers at once: not there (yet)
        await b.read_entry(1, 1)
    with pytest.raises(LedgerFencedError):  # the flag is up at once
        await b.add_entry(1, 2, entry(1, 2), KEY, False)
    hold.release()
    await asyncio.wait_for(asyncio.gather(add, first, second), DEADLINE_S)
    # Entry 1 carries LAC 0: both fences returned only once it was applied.
    assert seen_lac == {"first": 0, "second": 0}
    fsyncs = faults.fsyncs
    await b.fence(1, KEY)  # durably fenced already: nothing to journal, nothing to wait for
    assert faults.fsyncs == fsyncs
    await b.close()


async def test_digest_mismatch_is_rejected_and_nothing_stored(bookie):
    corrupt = bytearray(entry(1, 0))
    corrupt[-1] ^= 1
    with pytest.raises(DigestMismatchError):
        await bookie.add_entry(1, 0, bytes(corrupt), KEY, False)
    with pytest.raises(DigestMismatchError):  # valid digest, but for another entry id
        await bookie.add_entry(1, 1, entry(1, 0), KEY, False)
    with pytest.raises(DigestMismatchError):
        await bookie.add_entry(2, 0, entry(1, 0), KEY, False)
    assert not bookie.has_ledger(1) and not bookie.has_ledger(2)
    assert bookie.registry.get_sample_value("bookie_add_entry_failures_total", {"reason": "digest_mismatch"}) == 3


async def test_wrong_master_key_is_unauthorized(bookie):
    await add_all(bookie, 1, [0])
    with pytest.raises(UnauthorizedError):
        await bookie.add_entry(1, 1, entry(1, 1), b"other", False)
    with pytest.raises(UnauthorizedError):
        await bookie.fence(1, b"other")
    assert not bookie.is_fenced(1)
    with pytest.raises(NoSuchEntryError):
        await bookie.read_entry(1, 1)


# ---- fencing -----------------------------------------------------------------


async def test_fencing_rules(bookie):
    await add_all(bookie, 1, range(3))
    await bookie.fence(1, KEY)
    assert bookie.is_fenced(1)
    with pytest.raises(LedgerFencedError):
        await bookie.add_entry(1, 3, entry(1, 3), KEY, False)
    await bookie.add_entry(1, 3, entry(1, 3), KEY, True)  # a recovery add passes
    assert await bookie.read_entry(1, LAST_ENTRY) == entry(1, 3)
    await bookie.fence(1, KEY)  # idempotent


async def test_fencing_an_unknown_ledger_creates_its_state(bookie):
    await bookie.fence(5, KEY)
    assert bookie.has_ledger(5) and bookie.is_fenced(5)
    with pytest.raises(LedgerFencedError):  # the old writer reaching this bookie late
        await bookie.add_entry(5, 0, entry(5, 0), KEY, False)
    with pytest.raises(UnauthorizedError):
        await bookie.add_entry(5, 0, entry(5, 0), b"other", True)


async def test_fence_and_key_survive_clean_restart(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(2))
    await b.fence(1, KEY)
    await b.close()
    b = await Bookie.open(config)
    assert b.is_fenced(1)
    with pytest.raises(LedgerFencedError):
        await b.add_entry(1, 2, entry(1, 2), KEY, False)
    with pytest.raises(UnauthorizedError):
        await b.add_entry(1, 2, entry(1, 2), b"other", True)
    await b.close()


# ---- crashes and replay ------------------------------------------------------


async def test_replay_after_crash_restores_entries_fences_and_keys(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(50))
    await b.checkpoint()  # part of the history is in ledger storage already
    await add_all(b, 1, range(50, 80))
    await add_all(b, 2, range(10), key=b"key-2")
    await b.fence(2, b"key-2")
    await b.fence(3, b"key-3")  # fenced without ever receiving an entry
    await b.halt()  # crash: the write cache is lost, the journal is not

    b = await Bookie.open(config)
    assert b.replayed_records > 0
    assert [await b.read_entry(1, e) for e in range(80)] == [entry(1, e) for e in range(80)]
    assert [await b.read_entry(2, e) for e in range(10)] == [entry(2, e) for e in range(10)]
    assert b.read_lac(1) == 78
    assert b.is_fenced(2) and b.is_fenced(3) and not b.is_fenced(1)
    with pytest.raises(UnauthorizedError):
        await b.add_entry(2, 10, entry(2, 10), KEY, True)
    with pytest.raises(UnauthorizedError):
        await b.fence(3, KEY)
    await b.add_entry(1, 80, entry(1, 80), KEY, False)  # the ledger still takes adds with its key
    await b.close()


async def test_replay_tolerates_a_torn_journal_tail(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(20))
    journal_file = config.journal_dir / journal_file_name(b._journal.current_file_id)
    await b.halt()
    with open(journal_file, "ab") as fh:  # crash in the middle of writing a record
        fh.write(b"\x00\x00\x01\x00\xde\xad\xbe\xef" + b"half a record")
    b = await Bookie.open(config)
    assert [await b.read_entry(1, e) for e in range(20)] == [entry(1, e) for e in range(20)]
    await add_all(b, 1, range(20, 25))
    await b.halt()
    b = await Bookie.open(config)  # the torn file and the newer one both replay
    assert await b.read_entry(1, LAST_ENTRY) == entry(1, 24)
    await b.close()


async def test_replay_of_a_flipped_byte_in_the_last_record(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(10))
    journal_file = config.journal_dir / journal_file_name(b._journal.current_file_id)
    await b.halt()
    raw = bytearray(journal_file.read_bytes())
    raw[-10] ^= 0x01
    journal_file.write_bytes(bytes(raw))
    b = await Bookie.open(config)
    # The damaged last record stands for a write the crash interrupted.
    assert [await b.read_entry(1, e) for e in range(9)] == [entry(1, e) for e in range(9)]
    with pytest.raises(NoSuchEntryError):
        await b.read_entry(1, 9)
    await b.close()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from storage import digest
    from storage.bookie.bookie import Bookie
    from storage.bookie.config import BookieConfig

    async def main():
        config = BookieConfig(metadata_store_url="mem://", data_dir=sys.argv[1], flush_interval_ms=50,
                              write_cache_max_bytes=64 * 1024)
        b = await Bookie.open(config)
        await b.fence(2, b"k2")
        print("fenced", flush=True)
        entry_id = 0
        while True:
            batch = range(entry_id, entry_id + 20)
            await asyncio.gather(*(b.add_entry(1, e, digest.package(1, e, e - 1, 0, b"p" * 500), b"k", False)
                                   for e in batch))
            print("acked", batch[-1], flush=True)
            entry_id += 20

    asyncio.run(main())
    """
)


async def test_kill_9_loses_no_acknowledged_entry(tmp_path):
    data_dir = tmp_path / "bookie"
    # enough for checkpoints and write-cache flushes to have happened before the kill
    acked = await kill_9_after_acks(_CHILD, data_dir, at_least=2000, timeout_s=30)

    # The crash left part of the history in ledger storage, the rest only in the journal.
    index = LedgerIndex(data_dir / "ledgers" / "index", map_size_bytes=1 << 30)
    flushed = index.entry_count()
    index.close()
    assert 0 < flushed <= acked

    b = await Bookie.open(make_config(data_dir))
    assert b.is_fenced(2)
    for e in range(acked + 1):
        assert await b.read_entry(1, e) == digest.package(1, e, e - 1, 0, b"p" * 500)
    assert digest.peek_ids(await b.read_entry(1, LAST_ENTRY))[1] >= acked
    await b.close()


# ---- read_range --------------------------------------------------------------


async def test_read_range_rules(bookie):
    await add_all(bookie, 1, [0, 1, 2, 3, 4, 6])
    size = len(entry(1, 0))
    assert await bookie.read_range(1, 0, 10, 1 << 20) == [entry(1, e) for e in range(5)]  # stops at the gap
    assert await bookie.read_range(1, 1, 2, 1 << 20) == [entry(1, 1), entry(1, 2)]  # stops at last
    assert await bookie.read_range(1, 0, 10, 3 * size) == [entry(1, e) for e in range(3)]  # budget
    assert await bookie.read_range(1, 0, 10, 3 * size - 1) == [entry(1, e) for e in range(2)]
    assert await bookie.read_range(1, 2, 10, 1) == [entry(1, 2)]  # always at least one
    assert await bookie.read_range(1, 6, 6, 1 << 20) == [entry(1, 6)]
    with pytest.raises(NoSuchEntryError):
        await bookie.read_range(1, 5, 10, 1 << 20)


async def test_read_range_spans_disk_and_write_cache(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(30))
    await b.close()
    b = await Bookie.open(config)  # entries 0..29 now only on disk
    await add_all(b, 1, range(30, 40))  # 30..39 in the write cache
    assert await b.read_range(1, 25, 100, 1 << 20) == [entry(1, e) for e in range(25, 40)]
    assert b.registry.get_sample_value("bookie_write_cache_hits_total") == 10
    # Disk reads went through the read cache: a second read is all hits.
    assert await b.read_range(1, 25, 29, 1 << 20) == [entry(1, e) for e in range(25, 30)]
    assert b.registry.get_sample_value("bookie_read_cache_hits_total") == 5
    await b.close()


# ---- storage: checkpoint, index, bit rot, delete, compact ----------------------


async def test_index_survives_reopen_without_replay(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(100))
    await b.fence(1, KEY)
    await b.close()
    b = await Bookie.open(config)
    assert b.replayed_records == 0  # everything came from the index and entry logs
    assert b._storage.index.entry_count() == 100
    assert [await b.read_entry(1, e) for e in range(100)] == [entry(1, e) for e in range(100)]
    assert b.is_fenced(1) and b.read_lac(1) == 98
    await b.close()


async def test_checkpoint_moves_mark_and_removes_old_journal_files(tmp_path):
    config = make_config(tmp_path, journal_max_file_size_bytes=4096)
    b = await Bookie.open(config)
    for first in range(0, 100, 10):
        await add_all(b, 1, range(first, first + 10))
    assert len(list_journal_files(config.journal_dir)) > 3
    await b.checkpoint()
    mark = read_mark(config.journal_dir)
    assert mark == b._journal.synced_position.main
    assert list_journal_files(config.journal_dir) == [mark.file_id]
    await b.halt()
    b = await Bookie.open(config)
    assert b.replayed_records == 0
    assert await b.read_entry(1, 99) == entry(1, 99)
    await b.close()


async def test_periodic_checkpoint(tmp_path):
    b = await Bookie.open(make_config(tmp_path, flush_interval_ms=10))
    await add_all(b, 1, range(10))
    await wait_until_async(lambda: b._storage.index.entry_count() == 10, DEADLINE_S, "a periodic checkpoint")
    await b.close()


async def test_full_write_cache_triggers_a_flush(tmp_path):
    b = await Bookie.open(make_config(tmp_path, write_cache_max_bytes=4096))
    for first in range(0, 200, 10):
        await add_all(b, 1, range(first, first + 10))
        # Adds check for room when they arrive, so the cache overshoots by at most what is in flight.
        assert b._storage.write_cache_bytes <= 4096 + 10 * len(entry(1, 0))
    assert b._storage.index.entry_count() > 0  # flushed without any explicit checkpoint
    assert [await b.read_entry(1, e) for e in range(200)] == [entry(1, e) for e in range(200)]
    await b.close()


async def test_bit_rot_is_reported_never_returned(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(5))
    await b.checkpoint()
    loc = b._storage.index.get(1, 2)
    await b.close()
    with open(config.ledger_dir / entry_log_name(loc.log_id), "r+b") as fh:
        fh.seek(loc.offset + loc.length - 7)
        fh.write(b"GARBAGE")
    b = await Bookie.open(config)  # fresh caches: the read must go to disk
    with pytest.raises(EntryCorruptedOnDiskError):
        await b.read_entry(1, 2)
    with pytest.raises(EntryCorruptedOnDiskError):
        await b.read_range(1, 2, 4, 1 << 20)
    assert await b.read_range(1, 0, 4, 1 << 20) == [entry(1, 0), entry(1, 1)]
    assert await b.read_entry(1, 3) == entry(1, 3)
    await b.close()


def ledger_dir_bytes(config: BookieConfig) -> int:
    return sum(p.stat().st_size for p in config.ledger_dir.glob("entrylog-*.log"))


async def test_delete_ledger_and_compact_reclaim_space(tmp_path):
    config = make_config(tmp_path, entry_log_max_file_size_bytes=32 * 1024)
    b = await Bookie.open(config)
    for first in range(0, 100, 10):  # interleave ledgers across entry logs
        for ledger_id in (1, 2, 3):
            await add_all(b, ledger_id, range(first, first + 10), size=300)
        await b.checkpoint()
    before = ledger_dir_bytes(config)
    await b.delete_ledger(1)
    await b.delete_ledger(2)
    assert not b.has_ledger(1) and b.ledger_ids() == [3]
    with pytest.raises(NoSuchLedgerError):
        await b.read_entry(1, 0)
    reclaimed = await b.compact(0.5)
    after = ledger_dir_bytes(config)
    assert reclaimed > 0 and before - after == reclaimed
    assert after < before * 0.6
    assert [await b.read_entry(3, e) for e in range(100)] == [entry(3, e, 300) for e in range(100)]
    assert b.registry.get_sample_value("bookie_compaction_reclaimed_bytes_total") == reclaimed
    await b.close()
    b = await Bookie.open(config)
    assert b.ledger_ids() == [3]
    assert [await b.read_entry(3, e) for e in range(100)] == [entry(3, e, 300) for e in range(100)]
    await b.close()


async def test_delete_ledger_with_unflushed_entries(bookie):
    await add_all(bookie, 1, range(5))
    await bookie.delete_ledger(1)
    await bookie.checkpoint()
    assert not bookie.has_ledger(1)
    assert bookie._storage.index.entry_count() == 0
    await bookie.delete_ledger(1)  # idempotent


async def test_metrics_and_disk_usage(tmp_path):
    registry = CollectorRegistry()
    b = await Bookie.open(make_config(tmp_path), registry=registry)
    empty = b.disk_usage_bytes()
    await add_all(b, 1, range(20), size=1000)
    await b.read_entry(1, 0)
    await b.checkpoint()
    value = registry.get_sample_value
    assert value("bookie_add_entry_total") == 20
    assert value("bookie_read_entry_total") == 1
    assert value("bookie_journal_group_size_records_sum") == 21  # 20 adds + the master key record
    assert value("bookie_journal_fsync_latency_seconds_count") == value("bookie_journal_group_size_records_count")
    assert value("bookie_journal_written_bytes_total") > 20 * 1000
    assert value("bookie_entry_log_written_bytes_total") > 20 * 1000
    assert value("bookie_ledgers") == 1
    assert b.disk_usage_bytes() >= empty + 40 * 1000  # journal + entry log copies
    await b.close()


async def test_a_second_bookie_on_the_same_directories_is_refused(tmp_path):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    with pytest.raises(BookieStartupError):
        await Bookie.open(config)
    await add_all(b, 1, [0])  # the first one is unharmed
    await b.close()
    b = await Bookie.open(config)
    assert await b.read_entry(1, 0) == entry(1, 0)
    await b.close()


async def test_failed_checkpoint_keeps_entries_and_the_next_one_retries(tmp_path, monkeypatch):
    config = make_config(tmp_path)
    b = await Bookie.open(config)
    await add_all(b, 1, range(10))
    mark_before = read_mark(config.journal_dir)
    real_fsync = os.fsync
    calls = []

    def failing_once(fd):
        if not calls:
            calls.append(fd)
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_once)
    with pytest.raises(BookieInternalError):
        await b.checkpoint()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert read_mark(config.journal_dir) == mark_before  # the journal still covers the entries
    assert [await b.read_entry(1, e) for e in range(10)] == [entry(1, e) for e in range(10)]
    await b.checkpoint()
    assert b._storage.index.entry_count() == 10
    await b.halt()
    b = await Bookie.open(config)
    assert b.replayed_records == 0
    assert [await b.read_entry(1, e) for e in range(10)] == [entry(1, e) for e in range(10)]
    await b.close()
