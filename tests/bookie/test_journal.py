"""Journal: record codec, torn tails, damage classification, rotation, checkpoint mark, group commit, ack-after-fsync."""

from __future__ import annotations

import asyncio
import os
import struct
import threading

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.bookie.config import BookieConfig
from storage.bookie.file_writes import REMOVING_SUFFIX
from storage.bookie.journal import (
    ADD,
    FENCE,
    MARK_FILE,
    MASTER_KEY,
    Journal,
    JournalPosition,
    JournalRecord,
    RecordScanner,
    encode_record,
    record_parts,
    records_after,
    journal_file_name,
    list_journal_files,
    read_mark,
    write_mark,
)
from storage.errors import BookieInternalError, BookieShuttingDownError

DEADLINE_S = 10.0


def make_config(tmp_path, **changes) -> BookieConfig:
    changes.setdefault("journal_flush_when_queue_empty", True)
    return BookieConfig(metadata_store_url="mem://", data_dir=tmp_path, **changes)


def records(n: int, ledger_id: int = 7) -> list[JournalRecord]:
    return [JournalRecord(ADD, ledger_id, i, b"entry-%d" % i * 10) for i in range(n)]


async def start_journal(config, *, fsync=None, clock=None, observe=None, applied=None) -> Journal:
    config.journal_dir.mkdir(parents=True, exist_ok=True)
    kwargs = {"fsync": fsync, "observe_group": observe}
    if clock is not None:
        kwargs["clock"] = clock
    journal = Journal(config.journal_dir, config, **kwargs)
    sink = applied if applied is not None else []
    journal.start(asyncio.get_running_loop(), sink.extend)
    return journal


async def wait_event(event: threading.Event, what: str) -> None:
    if not await asyncio.to_thread(event.wait, DEADLINE_S):
        raise TimeoutError(f"timed out waiting for {what}")


# ---- codec -----------------------------------------------------------------


def _copied_encode(record: JournalRecord) -> bytes:
    """The record layout spelled out (the module docstring), independent of the writer's parts."""
    body = struct.pack(">Bq", record.kind, record.ledger_id)
    body += struct.pack(">q", record.entry_id) + record.data if record.kind == ADD else record.data
    return struct.pack(">II", len(body), crc32c(body)) + body


@pytest.mark.parametrize("record", [JournalRecord(ADD, 7, 3, b"x" * 65536), JournalRecord(ADD, 1, 0, b""),
                                    JournalRecord(FENCE, 9), JournalRecord(MASTER_KEY, 2, -1, b"key")])
def test_the_parts_are_the_record_and_the_payload_is_not_copied(record):
    parts = record_parts(record)
    assert b"".join(parts) == encode_record(record) == _copied_encode(record)
    if record.data:
        assert parts[-1] is record.data  # handed to writev as it is


def test_record_layout_is_length_crc_body():
    raw = encode_record(JournalRecord(FENCE, 5))
    body = struct.pack(">Bq", FENCE, 5)
    assert raw == struct.pack(">II", len(body), crc32c(body)) + body


@pytest.mark.parametrize(
    "record",
    [
        JournalRecord(ADD, 1, 0, b"packaged entry bytes"),
        JournalRecord(ADD, 2**62, 2**40, b""),
        JournalRecord(FENCE, 3),
        JournalRecord(MASTER_KEY, 4, -1, b"\x00secret\xff"),
    ],
)
def test_records_round_trip(record):
    raw = encode_record(record) + encode_record(JournalRecord(FENCE, 99))
    scanner = RecordScanner(raw)
    decoded = list(scanner)
    assert [r for r, _ in decoded] == [record, JournalRecord(FENCE, 99)]
    assert decoded[-1][1] == len(raw)
    assert scanner.stopped_at is None


def test_scanner_stops_at_truncated_record():
    good = b"".join(encode_record(r) for r in records(3))
    last = encode_record(JournalRecord(ADD, 7, 3, b"x" * 50))
    for cut in (1, 7, 8, 20, len(last) - 1):
        scanner = RecordScanner(good + last[:cut])
        assert [r.entry_id for r, _ in scanner] == [0, 1, 2]
        assert scanner.stopped_at == len(good)


def test_scanner_stops_at_flipped_byte_in_last_record():
    good = b"".join(encode_record(r) for r in records(3))
    last = bytearray(encode_record(JournalRecord(ADD, 7, 3, b"x" * 50)))
    last[30] ^= 0x40
    scanner = RecordScanner(good + bytes(last))
    assert [r.entry_id for r, _ in scanner] == [0, 1, 2]
    assert scanner.stopped_at == len(good)
    assert "crc" in scanner.reason


def test_scanner_rejects_zeroed_tail():
    # A preallocated or zero-filled tail must not parse as empty records.
    good = encode_record(JournalRecord(FENCE, 1))
    scanner = RecordScanner(good + b"\x00" * 64)
    assert [r for r, _ in scanner] == [JournalRecord(FENCE, 1)]
    assert scanner.stopped_at == len(good)


def test_scanner_rejects_implausible_length():
    scanner = RecordScanner(struct.pack(">II", 0xFFFFFFFF, 0) + b"junk")
    assert list(scanner) == []
    assert scanner.stopped_at == 0


_records = st.lists(
    st.one_of(
        st.builds(
            JournalRecord, st.just(ADD), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.binary(max_size=64)
        ),
        st.builds(lambda ledger_id: JournalRecord(FENCE, ledger_id), st.integers(0, 2**63 - 1)),
        st.builds(JournalRecord, st.just(MASTER_KEY), st.integers(0, 2**63 - 1), st.just(-1), st.binary(max_size=16)),
    ),
    min_size=1,
    max_size=8,
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(_records, st.data())
def test_damaged_tail_yields_a_clean_prefix(written, data):
    raw = b"".join(encode_record(r) for r in written)
    damaged = bytearray(raw[: data.draw(st.integers(0, len(raw)), label="cut")])
    if damaged and data.draw(st.booleans(), label="flip"):
        damaged[data.draw(st.integers(0, len(damaged) - 1), label="at")] ^= data.draw(st.integers(1, 255))
    scanner = RecordScanner(bytes(damaged))
    got = [r for r, _ in scanner]
    assert got == written[: len(got)]
    prefix_bytes = sum(len(encode_record(r)) for r in got)
    # A clean stop only where the damage happens to end on a record boundary.
    assert scanner.stopped_at == (None if prefix_bytes == len(damaged) else prefix_bytes)


# ---- mark ------------------------------------------------------------------


def test_mark_round_trip_and_corruption(tmp_path):
    assert read_mark(tmp_path) is None
    write_mark(tmp_path, JournalPosition(3, 4096))
    assert read_mark(tmp_path) == JournalPosition(3, 4096)
    write_mark(tmp_path, JournalPosition(4, 0))
    assert read_mark(tmp_path) == JournalPosition(4, 0)
    assert not (tmp_path / (MARK_FILE + ".tmp")).exists()
    raw = bytearray((tmp_path / MARK_FILE).read_bytes())
    raw[3] ^= 1
    (tmp_path / MARK_FILE).write_bytes(bytes(raw))
    assert read_mark(tmp_path) is None  # unreadable mark: replay everything


# ---- journal on disk -------------------------------------------------------


async def test_round_trip_through_files(tmp_path):
    config = make_config(tmp_path)
    applied: list[JournalRecord] = []
    journal = await start_journal(config, applied=applied)
    written = records(50) + [JournalRecord(FENCE, 7), JournalRecord(MASTER_KEY, 8, -1, b"k")]
    await asyncio.wait_for(asyncio.gather(*(journal.append(r) for r in written)), DEADLINE_S)
    assert applied == written  # applied on the loop, in order, before the acks
    assert journal.synced_position == JournalPosition(1, sum(len(encode_record(r)) for r in written))
    await journal.close()

    reopened = Journal(config.journal_dir, config)
    assert list(reopened.replay(None)) == written


async def test_acknowledged_only_after_fsync(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def held_fsync(fd: int) -> None:
        entered.set()
        if not release.wait(DEADLINE_S):
            raise OSError("test never released the fsync")
        os.fdatasync(fd)

    applied: list[JournalRecord] = []
    journal = await start_journal(make_config(tmp_path), fsync=held_fsync, applied=applied)
    fut = journal.append(JournalRecord(ADD, 1, 0, b"body"))
    await wait_event(entered, "the journal to reach fsync")
    # The record is written but not yet synced: no ack, not applied.
    assert not fut.done()
    assert applied == []
    assert journal.synced_position == JournalPosition(1, 0)
    release.set()
    await asyncio.wait_for(fut, DEADLINE_S)
    assert applied == [JournalRecord(ADD, 1, 0, b"body")]
    await journal.close()


async def test_records_queued_during_a_sync_share_one_fsync_and_one_wakeup(tmp_path, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    fsyncs = []

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        entered.set()
        if not release.wait(DEADLINE_S):
            raise OSError("test never released the fsync")

    groups: list[int] = []
    loop = asyncio.get_running_loop()
    wakeups = []
    real_call_soon_threadsafe = loop.call_soon_threadsafe

    def counting(callback, *args, **kwargs):
        wakeups.append(callback)
        return real_call_soon_threadsafe(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    journal = await start_journal(
        make_config(tmp_path), fsync=fsync, observe=lambda n, nbytes, secs: groups.append(n)
    )
    first = journal.append(JournalRecord(FENCE, 1))
    await wait_event(entered, "the first group's fsync")
    rest = [journal.append(r) for r in records(200)]
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), DEADLINE_S)
    await journal.close()
    assert groups == [1, 200]
    assert len(fsyncs) == 2
    # One loop wake-up per group, not per record (to_thread's own wake-ups aside).
    assert [cb for cb in wakeups if getattr(cb, "__self__", None) is journal] == [journal._complete] * 2


async def test_group_flushes_on_byte_threshold_with_frozen_clock(tmp_path):
    # The clock never advances and the queue-empty rule is off, so only the
    # byte threshold can trigger this flush.
    config = make_config(
        tmp_path,
        journal_flush_when_queue_empty=False,
        journal_max_group_wait_ms=10_000_000.0,
        journal_buffered_writes_threshold_bytes=100,
    )
    journal = await start_journal(config, clock=lambda: 42.0)
    await asyncio.wait_for(journal.append(JournalRecord(ADD, 1, 0, b"z" * 200)), DEADLINE_S)
    await journal.close()


async def test_fsync_failure_fails_the_group_and_everything_after(tmp_path):
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    journal = await start_journal(make_config(tmp_path), fsync=failing_fsync)
    with pytest.raises(BookieInternalError):
        await asyncio.wait_for(journal.append(JournalRecord(FENCE, 1)), DEADLINE_S)
    assert isinstance(journal.failed, OSError)
    with pytest.raises(BookieInternalError):
        await asyncio.wait_for(journal.append(JournalRecord(FENCE, 2)), DEADLINE_S)
    await journal.close()


async def test_rotation_and_replay_across_files(tmp_path):
    config = make_config(tmp_path, journal_max_file_size_bytes=1000)
    journal = await start_journal(config)
    written = records(60)
    for record in written:  # one group per record, so rotation happens between groups
        await asyncio.wait_for(journal.append(record), DEADLINE_S)
    await journal.close()
    files = list_journal_files(config.journal_dir)
    assert len(files) > 3
    assert all((config.journal_dir / journal_file_name(f)).stat().st_size <= 1000 for f in files)
    assert list(Journal(config.journal_dir, config).replay(None)) == written


async def test_replay_from_mark_and_removal_of_older_files(tmp_path):
    config = make_config(tmp_path, journal_max_file_size_bytes=1000)
    journal = await start_journal(config)
    written = records(60)
    for record in written[:30]:
        await asyncio.wait_for(journal.append(record), DEADLINE_S)
    mark = journal.synced_position
    for record in written[30:]:
        await asyncio.wait_for(journal.append(record), DEADLINE_S)
    write_mark(config.journal_dir, mark)
    removed = journal.remove_files_before(mark.file_id)
    await journal.close()
    assert removed and all(f < mark.file_id for f in removed)
    assert min(list_journal_files(config.journal_dir)) == mark.file_id
    assert list(Journal(config.journal_dir, config).replay(read_mark(config.journal_dir))) == written[30:]


async def test_a_file_left_part_way_through_its_removal_is_neither_replayed_nor_kept(tmp_path):
    """Removal renames a file aside before shrinking it (file_writes.remove_in_steps): a crash part-way leaves a
    shortened file that must not read as a damaged journal file, and the next start deletes it."""
    config = make_config(tmp_path, journal_max_file_size_bytes=1000)
    journal = await start_journal(config)
    written = records(40)
    for record in written:
        await asyncio.wait_for(journal.append(record), DEADLINE_S)
    await journal.close()
    first = min(list_journal_files(config.journal_dir))
    doomed = config.journal_dir / journal_file_name(first)
    aside = config.journal_dir / (journal_file_name(first) + REMOVING_SUFFIX)
    doomed.rename(aside)  # what remove_in_steps does first; then a crash after one shrinking step:
    os.truncate(aside, aside.stat().st_size // 2)
    replayed = Journal(config.journal_dir, config)
    survivors = list(replayed.replay(None))
    assert survivors and survivors == written[len(written) - len(survivors):]  # the rest, whole
    assert replayed.damage == []  # a shortened file under its own name would read as damage
    restarted = await start_journal(config)
    await restarted.close()
    assert not aside.exists()


async def test_torn_tail_on_disk_then_restart_keeps_later_files(tmp_path):
    config = make_config(tmp_path)
    journal = await start_journal(config)
    written = records(10)
    await asyncio.wait_for(asyncio.gather(*(journal.append(r) for r in written)), DEADLINE_S)
    await journal.close()
    path = config.journal_dir / journal_file_name(1)
    size = path.stat().st_size
    # Crash mid-write of an 11th record: half of it reached the disk.
    partial = encode_record(JournalRecord(ADD, 7, 10, b"never acked" * 20))
    with open(path, "ab") as fh:
        fh.write(partial[: len(partial) // 2])

    replaying = Journal(config.journal_dir, config)
    assert list(replaying.replay(None)) == written
    assert replaying.replay_stops == [(1, size, replaying.replay_stops[0][2])]

    # The restarted journal writes a new file; the torn one stays readable to its tear.
    later = [JournalRecord(FENCE, 7)]
    journal = await start_journal(config)
    assert journal.current_file_id == 2
    await asyncio.wait_for(journal.append(later[0]), DEADLINE_S)
    await journal.close()
    assert list(Journal(config.journal_dir, config).replay(None)) == written + later


async def test_flipped_byte_in_last_record_on_disk(tmp_path):
    config = make_config(tmp_path)
    journal = await start_journal(config)
    written = records(5)
    await asyncio.wait_for(asyncio.gather(*(journal.append(r) for r in written)), DEADLINE_S)
    await journal.close()
    path = config.journal_dir / journal_file_name(1)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert list(Journal(config.journal_dir, config).replay(None)) == written[:-1]


async def test_close_writes_what_is_queued(tmp_path):
    config = make_config(tmp_path)
    journal = await start_journal(config)
    pending = [journal.append(r) for r in records(20)]
    await journal.close()
    assert all(f.done() and f.exception() is None for f in pending)
    assert len(list(Journal(config.journal_dir, config).replay(None))) == 20


async def test_halt_drops_queued_records_like_a_crash(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def held_fsync(fd: int) -> None:
        entered.set()
        if not release.wait(DEADLINE_S):
            raise OSError("test never released the fsync")

    config = make_config(tmp_path)
    journal = await start_journal(config, fsync=held_fsync)
    first = journal.append(JournalRecord(FENCE, 1))
    await wait_event(entered, "the first group's fsync")
    queued = [journal.append(r) for r in records(5)]
    halting = asyncio.ensure_future(journal.halt())
    await asyncio.sleep(0)  # let halt() run up to its first await: it has queued its stop marker
    assert journal._queue.qsize() == 6  # the 5 records, then the halt
    release.set()
    await asyncio.wait_for(halting, DEADLINE_S)
    await asyncio.wait_for(first, DEADLINE_S)
    for fut in queued:
        with pytest.raises(BookieShuttingDownError):
            await fut
    assert list(Journal(config.journal_dir, config).replay(None)) == [JournalRecord(FENCE, 1)]


# ---- damage that is not a torn tail ---------------------------------------------


def test_records_after_a_bad_record_are_counted_with_their_ledgers():
    good = [encode_record(JournalRecord(ADD, 7, i, b"x" * 30)) for i in range(3)]
    later = [encode_record(JournalRecord(ADD, 8, 0, b"y" * 30)), encode_record(JournalRecord(FENCE, 9))]
    bad = bytearray(good[1])
    bad[12] ^= 0x01  # a flipped body bit: crc mismatch
    buf = good[0] + bytes(bad) + good[2] + b"".join(later)
    scanner = RecordScanner(buf)
    assert [r.entry_id for r, _ in scanner] == [0]
    assert scanner.stopped_at == len(good[0])
    assert records_after(buf, scanner.stopped_at) == (3, frozenset({7, 8, 9}))


@pytest.mark.parametrize("tail", [
    b"\x00" * 4096,  # zero-filled, as some filesystems leave an unsynced extent
    bytes(range(256)) * 16,  # garbage
    encode_record(JournalRecord(ADD, 7, 5, b"z" * 200))[:150],  # half a record
])
def test_nothing_after_a_torn_tail(tail):
    head = encode_record(JournalRecord(ADD, 7, 0, b"x" * 30))
    assert records_after(head + tail, len(head)) == (0, frozenset())


def test_a_lone_lucky_crc_in_garbage_does_not_count_but_a_record_ending_the_file_does():
    lone = encode_record(JournalRecord(FENCE, 3))
    assert records_after(b"\xff" * 9 + lone + b"\xff" * 9, 0) == (0, frozenset())  # neither chained nor at the end
    assert records_after(b"\xff" * 9 + lone, 0) == (1, frozenset({3}))


def _write_journal_file(config, file_id: int, chunks: list[bytes]) -> None:
    config.journal_dir.mkdir(parents=True, exist_ok=True)
    (config.journal_dir / journal_file_name(file_id)).write_bytes(b"".join(chunks))


def test_replay_classifies_a_mid_file_corruption_and_never_resynchronises(tmp_path):
    """Records after the bad one are proven by their own CRC but not by their framing:
    an entry payload can carry bytes that form a valid record (here a forged ADD to
    ledger 99), so replay stops at the damage and only reports what follows."""
    config = make_config(tmp_path)
    forged = encode_record(JournalRecord(ADD, 99, 0, b"injected"))
    written = [JournalRecord(ADD, 7, 0, b"a" * 20), JournalRecord(ADD, 7, 1, b"payload:" + forged),
               JournalRecord(ADD, 7, 2, b"c" * 20)]
    chunks = [encode_record(r) for r in written]
    damaged = bytearray(chunks[1])
    damaged[0:4] = struct.pack(">I", 13)  # the length now ends mid-payload, just before the forged record
    _write_journal_file(config, 1, [chunks[0], bytes(damaged), chunks[2]])
    journal = Journal(config.journal_dir, config)
    assert list(journal.replay(None)) == written[:1]
    (damage,) = journal.damage
    assert (damage.file_id, damage.offset, damage.reason) == (1, len(chunks[0]), "record crc mismatch")
    assert damage.records_after == 2 and damage.named_ledgers == {7, 99}  # a hint, never applied
    assert not damage.torn_tail
    assert f"journal-1.log is corrupt at offset {len(chunks[0])}" in damage.describe()


def test_replay_classifies_torn_tails(tmp_path):
    config = make_config(tmp_path)
    a, b = encode_record(JournalRecord(ADD, 7, 0, b"a" * 20)), encode_record(JournalRecord(ADD, 7, 1, b"b" * 20))
    _write_journal_file(config, 1, [a, b[:10]])  # torn by a crash...
    _write_journal_file(config, 2, [])  # ...then a restart crashed before its first checkpoint
    journal = Journal(config.journal_dir, config)
    assert len(list(journal.replay(None))) == 1
    assert [d.torn_tail for d in journal.damage] == [True]

    # The same tear with records in a later file was no crash tear: later writes followed it.
    _write_journal_file(config, 2, [b])
    journal = Journal(config.journal_dir, config)
    assert len(list(journal.replay(None))) == 2
    (damage,) = journal.damage
    assert not damage.torn_tail and damage.records_after == 0 and damage.later_file_nonempty


# ---- writing a group without copying its entries --------------------------------


@pytest.mark.parametrize("record", [
    JournalRecord(ADD, 7, 3, b"x" * 50),
    JournalRecord(ADD, 7, 4, b""),
    JournalRecord(FENCE, 9),
    JournalRecord(MASTER_KEY, 9, -1, b"key"),
    JournalRecord(ADD, 1, 0, bytes(range(256)) * 4096),  # 1 MiB
])
def test_a_records_parts_are_its_encoding_and_it_replays(record):
    parts = record_parts(record)
    raw = b"".join(parts)
    assert [r for r, _ in RecordScanner(raw)] == [record]
    if record.kind == ADD and record.data:
        assert parts[-1] is record.data  # the entry is written from where it is, not copied


async def test_a_small_add_queued_behind_a_large_one_is_acknowledged_before_the_large_one_is_synced(tmp_path):
    """Scripted: the first record's fsync is held while a 5 MiB add and a 100-byte add queue up behind it, then
    the 5 MiB add's fsync is held too. The small add (another ledger) is written, synced and acknowledged first."""
    first_entered, release_first = threading.Event(), threading.Event()
    large_entered, release_large = threading.Event(), threading.Event()
    calls = []

    def fsync(fd: int) -> None:
        size = os.fstat(fd).st_size
        calls.append(size)
        if len(calls) == 1:
            first_entered.set()
            release_first.wait(DEADLINE_S)
        elif size > 1024 * 1024:
            large_entered.set()
            if not release_large.wait(DEADLINE_S):
                raise OSError("test never released the large fsync")
        os.fdatasync(fd)

    applied: list[JournalRecord] = []
    journal = await start_journal(make_config(tmp_path), fsync=fsync, applied=applied)
    first = journal.append(JournalRecord(ADD, 9, 0, b"first"))
    await wait_event(first_entered, "the first fsync")
    large = journal.append(JournalRecord(ADD, 1, 0, b"L" * (5 * 1024 * 1024)))
    small = journal.append(JournalRecord(ADD, 2, 0, b"s" * 100))
    release_first.set()
    await asyncio.wait_for(small, DEADLINE_S)
    await wait_event(large_entered, "the large record's fsync")
    assert first.done() and not large.done()  # the small add did not wait for the large one's sync
    assert calls[1] < 1024 * 1024  # its own sync came before the large record was even written
    release_large.set()
    await asyncio.wait_for(large, DEADLINE_S)
    assert [(r.ledger_id, r.entry_id) for r in applied] == [(9, 0), (2, 0), (1, 0)]
    await journal.close()
    # Replay finds all three (a crash replays the file in its written order).
    replayed = [(r.ledger_id, r.entry_id) for r in Journal(make_config(tmp_path).journal_dir, make_config(tmp_path)).replay(None)]
    assert sorted(replayed) == [(1, 0), (2, 0), (9, 0)]
