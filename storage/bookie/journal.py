"""The bookie journal: a write-ahead log with group commit.

How this works
--------------
Every state change a bookie acknowledges goes through here first: entry adds
(``ADD``), fences (``FENCE``) and the first sight of a ledger's master key
(``MASTER_KEY``). The journal is a directory of append-only files
``journal-<id>.log``; each holds records

    [u32 length][u32 crc32c(body)][body]
    body = [u8 type][i64 ledger_id] + ADD: [i64 entry_id][packaged entry]
                                    | FENCE: nothing
                                    | MASTER_KEY: [key bytes]

(encoded and scanned back by journal_codec.py, which is pure).

Group commit: ``append()`` (on the event loop) queues a record and returns a
future. One writer thread takes queued records, and when the pure rule in
``group_commit.should_flush`` says so, writes the whole group with one
write() and one fdatasync, then wakes the loop once (one
``call_soon_threadsafe`` per group). On the loop, ``on_durable(records)``
applies the group to the bookie's state, ``synced_position`` advances, and the
futures resolve -- so an add is acknowledged only after its record is on disk,
and whatever ``synced_position`` covers has already been applied.

Checkpoint: the ledger storage periodically makes everything applied so far
durable on its own (entry logs + index). The bookie then records
``synced_position`` from *before* that flush in the mark file ``lastmark``
(tmp + fsync + rename + directory fsync) and deletes journal files wholly
before it. Replay on start reads the files from the mark onwards in order.

Crash tolerance: a crash mid-write leaves a truncated record or a bad CRC at
the end of a file; replay stops reading that file there (the record was never
acknowledged). Each start writes into a fresh file, so nothing is ever
appended after a torn tail, and a later file is still read in full.

Damage that is not a torn tail: replay never resynchronises inside a file.
The framing has no sync marker and entry payloads are client bytes, so a
scan past a bad record can land on bytes inside a payload that form a valid
record -- one a client could even have forged to inject an entry into
another ledger. What is proven is the prefix before the bad record and every
later file (each starts at offset 0, an unambiguous boundary). The scan is
only used to *classify* each stop (``JournalDamage``): valid records after
the bad one, or a later journal file that is not empty, mean the bad bytes
were followed by writes, so they were synced and may have held acknowledged
records; journal_damage.py decides what the bookie does about it.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import queue
import struct
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from crc32c import crc32c

from storage.bookie.config import BookieConfig
from storage.bookie.thread_priority import lower_this_thread
from storage.bookie import file_writes
from storage.bookie.file_writes import gather, write_all, write_in_steps
from storage.bookie.group_commit import LARGE_RECORD_BYTES, commit_order, keep_taking, should_flush, wait_budget_ms
from storage.bookie.journal_codec import (  # noqa: F401  (the codec's names are the journal's API too)
    ADD,
    FENCE,
    MASTER_KEY,
    JournalDamage,
    JournalRecord,
    RecordScanner,
    encode_record,
    record_parts,
    records_after,
)
from storage.errors import BookieInternalError, BookieShuttingDownError

log = logging.getLogger(__name__)

_MARK = struct.Struct(">QQI")  # file id, offset, crc32c of the first 16 bytes

MARK_FILE = "lastmark"


class JournalPosition(NamedTuple):
    """A point in the journal: everything before (file_id, offset) is covered."""

    file_id: int
    offset: int


def journal_file_name(file_id: int) -> str:
    return f"journal-{file_id}.log"


def list_journal_files(journal_dir: Path) -> list[int]:
    ids = []
    for name in os.listdir(journal_dir):
        if name.startswith("journal-") and name.endswith(".log"):
            try:
                ids.append(int(name[len("journal-") : -len(".log")]))
            except ValueError:
                continue
    return sorted(ids)


# ---- checkpoint mark -----------------------------------------------------


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_mark(journal_dir: Path) -> JournalPosition | None:
    """The last checkpoint mark, or None if there is none (or it is unreadable:
    replaying every journal file is then the safe answer)."""
    try:
        raw = (journal_dir / MARK_FILE).read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != _MARK.size:
        log.warning("journal mark in %s has %d bytes; replaying all journal files", journal_dir, len(raw))
        return None
    file_id, offset, crc = _MARK.unpack(raw)
    if crc32c(raw[:16]) != crc:
        log.warning("journal mark in %s fails its crc; replaying all journal files", journal_dir)
        return None
    return JournalPosition(file_id, offset)


def write_mark(journal_dir: Path, position: JournalPosition) -> None:
    """Durably replace the mark: a crash leaves either the old or the new one."""
    head = struct.pack(">QQ", position.file_id, position.offset)
    tmp = journal_dir / (MARK_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, head + struct.pack(">I", crc32c(head)))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, journal_dir / MARK_FILE)
    fsync_dir(journal_dir)


# ---- the journal ---------------------------------------------------------

_STOP = object()  # finish the pending group, then exit
_HALT = object()  # exit at once, failing what is pending (a simulated crash)

# (record count, bytes, fsync seconds), called from the writer thread.
GroupObserver = Callable[[int, int, float | None], None]  # records, bytes, fsync seconds (None: not synced)


class Journal:
    """Group-committing journal over ``journal_dir``. See the module docstring.

    Lifecycle: ``replay(mark)`` (optional, before start) -> ``start(loop,
    on_durable)`` -> ``append()`` ... -> ``close()``. ``fsync`` is the sync
    call (default ``os.fdatasync``); tests pass a hook that blocks to prove
    nothing is acknowledged before it returns.
    """

    def __init__(
        self,
        journal_dir: Path,
        config: BookieConfig,
        *,
        fsync: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        observe_group: GroupObserver | None = None,
        write_back_step_bytes: int = 0,
        thread_nice: int = 0,
    ):
        self.dir = Path(journal_dir)
        self._config = config
        self._thread_nice = thread_nice  # steps nicer for the writer thread (thread_priority.py): the large lane
        self.writer_nice: int | None = None  # what the writer thread got, once it runs
        # > 0 (the large lane): groups go to the device in steps (file_writes), so the other lane's fdatasync waits
        # behind one step. Without fdatasync (journal_sync_data off) there is no such wait, and steps only slow it.
        stepping = file_writes.write_back is not None and config.journal_sync_data
        self._write_back_step = write_back_step_bytes if stepping else 0
        self._fsync = fsync or os.fdatasync
        self._clock = clock
        self._observe = observe_group
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_durable: Callable[[list[JournalRecord]], None] | None = None
        self._fd = -1
        self._file_id = 0
        self._file_size = 0
        self._failed: BaseException | None = None
        self._closed = False
        self.synced_position: JournalPosition | None = None
        self.replay_stops: list[tuple[int, int, str]] = []  # (file id, offset, reason)
        self.damage: list[JournalDamage] = []  # one per replay stop, classified

    # -- replay ----------------------------------------------------------

    def replay(self, mark: JournalPosition | None) -> Iterator[JournalRecord]:
        """Yield every record after ``mark``, file by file, in order.

        Each file that ends early is noted in ``replay_stops`` and classified
        in ``damage``; replay goes on with the next file either way.
        """
        file_ids = list_journal_files(self.dir)
        sizes = {i: (self.dir / journal_file_name(i)).stat().st_size for i in file_ids}
        for file_id in file_ids:
            if mark is not None and file_id < mark.file_id:
                continue
            start = mark.offset if mark is not None and file_id == mark.file_id else 0
            path = self.dir / journal_file_name(file_id)
            size = path.stat().st_size
            if size <= start:
                continue
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                scanner = RecordScanner(mapped, start)
                records = iter(scanner)
                try:
                    for record, _end in records:
                        yield record
                finally:
                    records.close()  # drop the generator's views before the mmap closes
                    scanner.release()
                if scanner.stopped_at is not None:
                    count, ledgers = records_after(mapped, scanner.stopped_at)
                    damage = JournalDamage(
                        file_id, path, scanner.stopped_at, scanner.reason, count, ledgers,
                        any(sizes[i] > 0 for i in file_ids if i > file_id),
                    )
                    log.warning("%s; replay of that file stops there", damage.describe())
                    self.replay_stops.append((file_id, scanner.stopped_at, scanner.reason))
                    self.damage.append(damage)

    # -- writing ---------------------------------------------------------

    def start(
        self,
        loop: asyncio.AbstractEventLoop,
        on_durable: Callable[[list[JournalRecord]], None],
        mark: JournalPosition | None = None,
    ) -> None:
        """Open a fresh journal file (numbered after every existing file and
        the mark, so the mark never points past it) and start the writer."""
        self._loop = loop
        self._on_durable = on_durable
        for name in file_writes.remove_leftovers(self.dir):
            log.info("journal %s: deleted %s, a file a crash left part-way through its removal", self.dir, name)
        last = max(list_journal_files(self.dir) + [mark.file_id if mark is not None else 0])
        self._open_file(last + 1)
        self.synced_position = JournalPosition(self._file_id, 0)
        self._thread = threading.Thread(target=self._run, name=f"journal-writer-{self.dir}", daemon=True)
        self._thread.start()

    @property
    def current_file_id(self) -> int:
        return self._file_id

    @property
    def failed(self) -> BaseException | None:
        """The I/O error that stopped the journal, if any. A failed journal
        acknowledges nothing more: after a failed fsync the file's state is
        unknown, so retrying on the same file would be a lie."""
        return self._failed

    def append(self, record: JournalRecord) -> asyncio.Future:
        """Queue a record; the future resolves once it is fsynced and applied.

        Must be called on the journal's event loop. The future fails with
        BookieInternalError if the journal failed, BookieShuttingDownError if
        it is closing.
        """
        fut = self._loop.create_future()
        if self._failed is not None:
            fut.set_exception(BookieInternalError(f"journal failed: {self._failed}"))
        elif self._closed:
            fut.set_exception(BookieShuttingDownError("journal is closed"))
        else:
            self._queue.put((record, fut, self._clock() * 1000.0))
        return fut

    async def close(self) -> None:
        """Write and sync what is queued, then stop the writer."""
        await self._stop(_STOP)

    async def halt(self) -> None:
        """Stop the writer without writing what is queued (a simulated crash)."""
        await self._stop(_HALT)

    async def _stop(self, how) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(how)
            await asyncio.to_thread(self._thread.join)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # Let the wake-ups the writer scheduled on its way out run.
        await asyncio.sleep(0)

    def remove_files_before(self, file_id: int) -> list[int]:
        """Delete journal files wholly before ``file_id`` (blocking)."""
        removed = [i for i in list_journal_files(self.dir) if i < file_id]
        for i in removed:
            # In synced steps, so the small adds' fdatasyncs on this disk do not wait for the whole file's
            # blocks to be freed at once (file_writes.remove_in_steps: up to 59 ms measured for 256 MiB).
            file_writes.remove_in_steps(self.dir / journal_file_name(i), sync_dir=fsync_dir)
        return removed

    # -- writer thread ---------------------------------------------------

    def _open_file(self, file_id: int) -> None:
        path = self.dir / journal_file_name(file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        # The new name must survive a crash before any record in it is acked.
        fsync_dir(self.dir)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._file_id, self._file_size = fd, file_id, 0

    def _run(self) -> None:
        self.writer_nice = lower_this_thread(self._thread_nice)
        q, config, clock = self._queue, self._config, self._clock
        group: list[tuple[JournalRecord, asyncio.Future]] = []
        chunks: list[list[bytes]] = []  # each record's pieces
        group_bytes = small_bytes = 0
        oldest_ms: float | None = None
        while True:
            budget = wait_budget_ms(clock() * 1000.0, oldest_ms, config)
            try:
                if budget is None:
                    item = q.get()
                elif budget > 0:
                    item = q.get(timeout=budget / 1000.0)
                else:
                    item = q.get_nowait()
            except queue.Empty:
                item = None
            stop = None
            # Take everything already queued before deciding: under load the
            # oldest record is often overdue the moment it is taken, and
            # deciding per record would shrink groups to one.
            while item is not None:
                if item is _STOP or item is _HALT:
                    stop = item
                    break
                record, fut, queued_ms = item
                parts = record_parts(record)
                size = sum(len(p) for p in parts)
                group.append((record, fut))
                chunks.append(parts)
                group_bytes += size
                if size < LARGE_RECORD_BYTES:
                    small_bytes += size
                if oldest_ms is None:
                    oldest_ms = queued_ms
                if not keep_taking(small_bytes, group_bytes, config):
                    break
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    item = None
            if stop is _HALT:
                self._fail(group, BookieShuttingDownError("journal halted before this record was written"))
                return
            if group and (
                stop is _STOP or should_flush(clock() * 1000.0, oldest_ms, group_bytes, q.empty(), config)
            ):
                for commit in commit_order([(r.kind, r.ledger_id, sum(len(p) for p in parts))
                                            for (r, _f), parts in zip(group, chunks)]):
                    pieces = [p for i in commit for p in chunks[i]]
                    self._commit([group[i] for i in commit], pieces, sum(len(p) for p in pieces))
                group, chunks, group_bytes, small_bytes, oldest_ms = [], [], 0, 0, None
            if stop is _STOP:
                return

    def _commit(self, group, chunks: list[bytes], group_bytes: int) -> None:
        if self._failed is not None:
            self._fail(group, BookieInternalError(f"journal failed: {self._failed}"))
            return
        try:
            if self._file_size > 0 and self._file_size + group_bytes > self._config.journal_max_file_size_bytes:
                self._open_file(self._file_id + 1)
            if self._write_back_step and group_bytes > self._write_back_step:
                self._file_size += write_in_steps(self._fd, gather(chunks), self._write_back_step,
                                                  file_writes.write_back)
            else:
                self._file_size += write_all(self._fd, gather(chunks))
            elapsed = None  # journal_sync_data off: acknowledged from the page cache, no fsync to time
            if self._config.journal_sync_data:
                started = time.perf_counter()
                self._fsync(self._fd)
                elapsed = time.perf_counter() - started
        except OSError as exc:
            log.error("journal %s: write/fsync failed, journal stops acknowledging: %s", self.dir, exc)
            self._failed = exc
            self._fail(group, BookieInternalError(f"journal write failed: {exc}"))
            return
        if self._observe is not None:
            self._observe(len(group), group_bytes, elapsed)
        self._loop.call_soon_threadsafe(self._complete, group, JournalPosition(self._file_id, self._file_size))

    def _fail(self, group, error: Exception) -> None:
        if group:
            self._loop.call_soon_threadsafe(self._complete_with_error, group, error)

    # -- loop side of a group ------------------------------------------

    def _complete(self, group, position: JournalPosition) -> None:
        try:
            self._on_durable([record for record, _fut in group])
        except Exception as exc:  # a bug in applying; never leave callers hanging
            log.exception("journal %s: applying a durable group failed", self.dir)
            self._complete_with_error(group, BookieInternalError(f"applying journal records failed: {exc}"))
            return
        self.synced_position = position
        for _record, fut in group:
            if not fut.done():
                fut.set_result(None)

    @staticmethod
    def _complete_with_error(group, error: Exception) -> None:
        for _record, fut in group:
            if not fut.done():
                fut.set_exception(type(error)(str(error)))
