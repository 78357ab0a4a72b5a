"""The bookie core: the storage API the network server calls.

How this works
--------------
``Bookie`` owns a journal (journal.py) and a ledger storage
(ledger_storage.py) and enforces the ledger rules between them:

* add: the packaged entry's digest and ids must check out; the first add of
  a ledger records its master key (a MASTER_KEY journal record queued ahead of
  the ADD, so it is durable no later than the entry); a later add with
  another key is refused; a fenced ledger refuses all but recovery adds. The
  ADD record then goes to the journal, and the call returns once its group is
  fsynced -- at which point the group has already been applied to the write
  cache on the loop, so an acknowledged entry is immediately readable.
* fence: the flag is set in memory at once (any add checked after this point
  fails) and the call returns once the FENCE record is fsynced, so a fence
  survives a crash. The journal is FIFO, so by then every add queued before
  the fence is durable and applied too: a fencing read never answers "no such
  entry" for an add this bookie may still acknowledge. Fencing a fenced
  ledger writes nothing; it waits for the first FENCE record if that is still
  in the journal (recovery sends every read with the fence flag). Fencing a
  ledger the bookie has never seen creates its state: the recoverer may reach
  a bookie that received no entry.
* checkpoint (every ``flush_interval_ms``, when the write cache fills, and on
  close): note the journal's ``synced_position``, swap the write cache out,
  flush it to entry log + index on the storage thread, then write the journal
  mark at the noted position and delete journal files wholly before it.
  Everything the mark covers was applied before the swap, so it is all in
  the flushed snapshot (or in an earlier one).
* open: load ledger states from the index, replay journal records after the
  mark through the same apply function the live path uses, judge any damage
  replay found (journal_damage.py: refuse to start, or quarantine the file
  and run read-only), start a fresh journal file, checkpoint.

Threads: the event loop runs the rules and every in-memory structure; a
single storage thread runs flushes, deletes and compaction (serialised, so
they never race); a small pool serves disk reads; the journal has its own
writer thread.
"""

from __future__ import annotations

import asyncio
import fcntl
import hmac
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from prometheus_client import CollectorRegistry

from storage import digest
from storage.bookie.config import BookieConfig
from storage.bookie.index import LedgerDescriptor
from storage.bookie.journal import ADD, FENCE, MASTER_KEY, JournalRecord
from storage.bookie.journal_lanes import JournalLanes, LaneMarks
from storage.bookie.journal_damage import DamageJudge, policy_only, settle_damage
from storage.bookie.thread_priority import lower_this_thread
from storage.bookie.ledger_storage import FlushSnapshot, LedgerStorage, tree_size_bytes
from storage.bookie.metrics import FAILURE_REASONS, BookieMetrics
from storage.errors import (
    BadRequestError,
    BookieInternalError,
    BookieShuttingDownError,
    BookieStartupError,
    EntryCorruptedOnDiskError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    StorageError,
    UnauthorizedError,
)
from storage.protocol import LAST_ENTRY

log = logging.getLogger(__name__)

class Bookie:
    """One bookie's storage. Create with ``await Bookie.open(config)``."""

    def __init__(self, config: BookieConfig, registry: CollectorRegistry, metrics: BookieMetrics):
        self.config = config
        self.registry = registry
        self.metrics = metrics
        self._loop = asyncio.get_running_loop()
        # Flushes, checkpoints and compaction: a background writer, nicer than the threads that acknowledge adds.
        self.storage_thread_nice: int | None = None
        self._storage_thread = ThreadPoolExecutor(1, thread_name_prefix="bookie-storage",
                                                  initializer=self._lower_storage_thread)
        self._read_pool = ThreadPoolExecutor(4, thread_name_prefix="bookie-read")
        self._storage: LedgerStorage = None  # type: ignore[assignment]  # set by open()
        self._journal: JournalLanes = None  # type: ignore[assignment]
        self._mark: LaneMarks | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self._periodic: asyncio.Task | None = None
        self._closing = False
        self._lock_fds: list[int] = []
        self._fences_in_flight: dict[int, asyncio.Future] = {}  # ledger -> its FENCE record, until durable
        self.replayed_records = 0
        self.journal_damage: str | None = None  # set while damaged journal files are quarantined

    def _lower_storage_thread(self) -> None:
        self.storage_thread_nice = lower_this_thread(self.config.background_write_nice)

    @classmethod
    async def open(
        cls,
        config: BookieConfig,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        fsync: Callable[[int], None] | None = None,
        judge_damage: DamageJudge | None = None,
    ) -> "Bookie":
        """Create directories, open the index, replay the journal, checkpoint.

        ``clock`` drives group-commit decisions; ``fsync`` replaces the
        journal's fdatasync (tests hold it to prove acks wait for it).
        ``judge_damage(damage, ledger_ids)`` decides what journal damage
        means (BookieService checks ledger metadata); by default only the
        configured policy counts. Raises BookieStartupError when it refuses.
        """
        registry = registry if registry is not None else CollectorRegistry()
        self = cls(config, registry, BookieMetrics(registry))
        try:
            self._lock_fds = _lock_dirs([config.journal_dir, config.ledger_dir])
            self._storage = await self._in_storage(
                lambda: LedgerStorage(config, on_entry_log_write=self.metrics.entry_log_bytes.inc)
            )
            self._journal = JournalLanes(
                config.journal_dir, config, fsync=fsync, clock=clock, observe_group=self.metrics.observe_group
            )
            self._mark = self._journal.read_marks()
            self.replayed_records = await self._in_storage(self._replay)
            # Before the journal starts: nothing has been deleted or written yet.
            for lane_dir, damage in self._journal.damage_by_lane():
                self.journal_damage = await settle_damage(
                    lane_dir, damage, set(self._storage.states), judge_damage or policy_only(config), self._in_storage,
                ) or self.journal_damage
            self._journal.start(self._loop, self._apply_durable, self._mark)
            await self.checkpoint()
        except BaseException:
            await self._abandon()
            raise
        self.metrics.write_cache_bytes.set_function(lambda: self._storage.write_cache_bytes)
        self.metrics.ledgers.set_function(lambda: len(self._storage.states))
        self._periodic = self._loop.create_task(self._checkpoint_periodically())
        log.info(
            "bookie storage open: %d ledgers, %d journal records replayed",
            len(self._storage.states), self.replayed_records,
        )
        return self

    def _replay(self) -> int:
        """Storage thread, before the journal starts: nothing else runs yet."""
        count = 0
        for record in self._journal.replay(self._mark):
            self._apply_records((record,))
            count += 1
            if self._storage.write_cache_full:
                # Flush without moving the mark: a crash now replays again, harmlessly.
                snapshot = self._storage.begin_flush()
                self._storage.flush(snapshot)
                self._storage.end_flush(snapshot, True)
        return count

    def _apply_durable(self, records) -> None:
        """Journal callback, on the loop, once per fsynced group."""
        adds = self._apply_records(records)
        if adds:
            self.metrics.adds.inc(adds)

    def _apply_records(self, records) -> int:
        """Apply durable journal records to memory: the live path and replay
        use this same function. Returns the number of entries added."""
        storage = self._storage
        states = storage.states
        adds = 0
        for record in records:
            kind, ledger_id = record.kind, record.ledger_id
            state = states.get(ledger_id)
            if kind == ADD:
                if state is None:
                    continue  # the ledger was deleted while the add was in flight
                storage.put(ledger_id, record.entry_id, record.data, digest.peek_ids(record.data)[2])
                adds += 1
            elif kind == MASTER_KEY:
                if state is None:
                    states[ledger_id] = LedgerDescriptor(record.data)
                    storage.state_changed(ledger_id)
                elif state.master_key is None:
                    state.master_key = record.data
                    storage.state_changed(ledger_id)
            elif kind == FENCE and state is not None and not state.fenced:
                state.fenced = True
                storage.state_changed(ledger_id)
        return adds

    # ---- writes ----------------------------------------------------------

    async def add_entry(self, ledger_id: int, entry_id: int, body: bytes, master_key: bytes, recovery: bool) -> None:
        """Store an entry; returns once it is fsynced in the journal.

        Raises DigestMismatchError, BadRequestError (lac out of range), UnauthorizedError, LedgerFencedError,
        BookieShuttingDownError, BookieInternalError (journal or disk failure).
        """
        try:
            if self._closing:
                raise BookieShuttingDownError("bookie is shutting down")
            lac, length = digest.verify_header(body, ledger_id, entry_id)
            if not LAST_ENTRY <= lac < entry_id or length < 0:
                # The LAC rides on every entry and READ_LAC reports the highest: one beyond its own entry would
                # have readers and recovery look for entries that were never written.
                raise BadRequestError(f"ADD ledger {ledger_id} entry {entry_id} carries lac {lac} (must be "
                                      f"-1..{entry_id - 1}) and length {length} (must be >= 0)")
            if not self._storage.write_cache_has_room(len(body)):
                await self._make_room(len(body))
            state = self._state_for_write(ledger_id, master_key)
            if state.fenced and not recovery:
                raise LedgerFencedError(f"ledger {ledger_id} is fenced")
            await self._journal.append(JournalRecord(ADD, ledger_id, entry_id, body))
        except StorageError as exc:
            self.metrics.add_failures.labels(FAILURE_REASONS.get(type(exc).__name__, "other")).inc()
            raise

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Fence a ledger; returns once the fence is durable -- and with it
        every add queued before the fence, so a read that follows sees each
        add the old writer can still get acknowledged here.

        Raises UnauthorizedError, BookieShuttingDownError, BookieInternalError
        (journal failed).
        """
        if self._closing:
            raise BookieShuttingDownError("bookie is shutting down")
        if self._journal.failed is not None:
            raise BookieInternalError(f"journal failed, cannot make a fence durable: {self._journal.failed}")
        state = self._state_for_write(ledger_id, master_key)
        if state.fenced:
            # Adds checked after the flag went up were refused (recovery adds
            # aside), so the first FENCE record is the barrier: wait for it if
            # it is still in the journal; once durable there is nothing to wait for.
            pending = self._fences_in_flight.get(ledger_id)
            if pending is not None:
                await asyncio.shield(pending)
            return
        state.fenced = True
        self._storage.state_changed(ledger_id)
        pending = self._journal.append(JournalRecord(FENCE, ledger_id))
        self._fences_in_flight[ledger_id] = pending
        pending.add_done_callback(
            lambda f: self._fences_in_flight.pop(ledger_id) if self._fences_in_flight.get(ledger_id) is f else None
        )
        await asyncio.shield(pending)

    def _state_for_write(self, ledger_id: int, master_key: bytes) -> LedgerDescriptor:
        """The ledger's state, created (with a journaled key) if new; checks the key."""
        states = self._storage.states
        state = states.get(ledger_id)
        if state is not None and state.master_key is not None:
            if not hmac.compare_digest(state.master_key, master_key):
                raise UnauthorizedError(f"wrong master key for ledger {ledger_id}")
            return state
        if state is None:
            state = states[ledger_id] = LedgerDescriptor(master_key)
        else:
            state.master_key = master_key
        self._storage.state_changed(ledger_id)
        # Queued ahead of whatever record follows, so durable no later than it;
        # the caller awaits that record, so nobody awaits this one.
        self._journal.append(JournalRecord(MASTER_KEY, ledger_id, -1, master_key)).add_done_callback(_consume)
        return state

    async def _make_room(self, entry_bytes: int) -> None:
        """Back-pressure: wait until the write cache has room for an entry of ``entry_bytes``, starting a flush."""
        counted = False
        while not self._storage.write_cache_has_room(entry_bytes):
            if self._checkpoint_task is None:
                self._start_checkpoint()
            else:
                if not counted:
                    size = "large" if self.config.is_large_entry(entry_bytes) else "small"
                    self.metrics.write_cache_waits.labels(size).inc()
                    counted = True
                try:
                    await asyncio.shield(self._checkpoint_task)
                except StorageError as exc:
                    raise BookieInternalError(f"write cache is full and flushing it failed: {exc}") from exc

    # ---- reads -----------------------------------------------------------

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """A packaged entry; ``LAST_ENTRY`` reads the highest entry held.

        Raises NoSuchLedgerError, NoSuchEntryError, EntryCorruptedOnDiskError.
        """
        self.metrics.reads.inc()
        state = self._known(ledger_id)
        if entry_id == LAST_ENTRY:
            entry_id = state.last_entry_id
        if entry_id < 0 or entry_id > state.last_entry_id:
            raise NoSuchEntryError(f"ledger {ledger_id} has no entry {entry_id} on this bookie")
        body, from_write_cache = self._storage.cached(ledger_id, entry_id)
        if body is not None:
            (self.metrics.write_cache_hits if from_write_cache else self.metrics.read_cache_hits).inc()
            return body
        self.metrics.read_cache_misses.inc()
        body = await self._in_read_pool(self._storage.read, ledger_id, entry_id)
        if ledger_id in self._storage.states:
            self._storage.read_cache.put((ledger_id, entry_id), body)
        return body

    async def fencing_read(self, ledger_id: int, entry_id: int, master_key: bytes) -> bytes:
        """Fence, then read: recovery's way to tell "missing" from "not yet" (see ``fence``).

        With quarantined journal damage the bookie may have lost acknowledged
        entries, so "missing" becomes BookieInternalError (LAST_ENTRY answers
        stay: a low tail only makes recovery read further).
        """
        await self.fence(ledger_id, master_key)
        try:
            return await self.read_entry(ledger_id, entry_id)
        except (NoSuchEntryError, NoSuchLedgerError) as exc:
            if self.journal_damage is None or entry_id == LAST_ENTRY:
                raise
            raise BookieInternalError(
                f"cannot vouch that ledger {ledger_id} entry {entry_id} is missing: {self.journal_damage}"
            ) from exc

    async def read_range(self, ledger_id: int, first: int, last: int, max_bytes: int) -> list[bytes]:
        """Consecutive entries from ``first``: stops at a missing entry, after
        ``last``, or before ``max_bytes`` would be exceeded; at least one entry
        if ``first`` exists. Raises NoSuchLedgerError, NoSuchEntryError (first
        missing), EntryCorruptedOnDiskError (first corrupt)."""
        self.metrics.reads.inc()
        state = self._known(ledger_id)
        storage = self._storage
        last = min(last, state.last_entry_id)
        out: list[bytes] = []
        total = 0
        entry_id = first
        while entry_id <= last:
            body, from_write_cache = storage.cached(ledger_id, entry_id)
            if body is not None:
                if out and total + len(body) > max_bytes:
                    break
                (self.metrics.write_cache_hits if from_write_cache else self.metrics.read_cache_hits).inc()
                out.append(body)
                total += len(body)
                entry_id += 1
                continue
            # The next stretch is on disk (flushed entries precede the cached tail).
            self.metrics.read_cache_misses.inc()
            try:
                bodies = await self._in_read_pool(
                    storage.read_consecutive, ledger_id, entry_id, last, max_bytes - total, not out
                )
            except (EntryCorruptedOnDiskError, NoSuchEntryError):
                if out:
                    break  # the range ends before the bad entry; reading it alone reports it
                raise
            if not bodies:
                break
            if ledger_id in storage.states:
                for offset, body in enumerate(bodies):
                    storage.read_cache.put((ledger_id, entry_id + offset), body)
            out.extend(bodies)
            total += sum(map(len, bodies))
            entry_id += len(bodies)
        if not out:
            raise NoSuchEntryError(f"ledger {ledger_id} has no entry {first} on this bookie")
        return out

    async def verify_on_disk(self, ledger_id: int, entry_id: int) -> int:
        """Scrubbing: read one entry from its entry log (no cache) and verify its digest.

        Returns its size; 0 when it is not on disk (not held here, or still
        only in the write cache). Raises EntryCorruptedOnDiskError.
        """
        if self._storage.cached(ledger_id, entry_id)[1]:
            return 0  # a newer copy waits for the next checkpoint; the entry log's may be the bad one it replaces
        try:
            body = await self._in_read_pool(self._storage.read, ledger_id, entry_id)
        except NoSuchEntryError:
            return 0
        except EntryCorruptedOnDiskError:
            # A copy cached before the rot would hide it from the repair's read.
            self._storage.read_cache.discard((ledger_id, entry_id))
            raise
        return len(body)

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id held for a ledger (-1: none). Raises NoSuchLedgerError."""
        return self._known(ledger_id).last_entry_id

    def read_lac(self, ledger_id: int) -> int:
        """The highest LAC carried by this ledger's entries here (-1 if none)."""
        return self._known(ledger_id).lac

    def knows_key(self, ledger_id: int) -> bool:
        """Whether a master key is recorded for the ledger (then every add and fence is checked against it)."""
        state = self._storage.states.get(ledger_id)
        return state is not None and state.master_key is not None

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._storage.states.get(ledger_id)
        return state is not None and state.fenced

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._storage.states

    def ledger_ids(self) -> list[int]:
        return sorted(self._storage.states)

    def _known(self, ledger_id: int) -> LedgerDescriptor:
        state = self._storage.states.get(ledger_id)
        if state is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} is unknown to this bookie")
        return state

    # ---- maintenance -----------------------------------------------------

    async def delete_ledger(self, ledger_id: int) -> None:
        """Forget a ledger (idempotent). Its bytes are reclaimed by compaction.

        Not journaled: if the bookie crashes before the next checkpoint, replay
        can bring back a ledger whose key record is after the mark; the GC loop
        deletes it again because the metadata store no longer lists it.
        """
        self._storage.forget_ledger(ledger_id)
        await self._in_storage(self._storage.delete_ledger_on_disk, ledger_id)

    async def compact(self, threshold: float | None = None) -> int:
        """Rewrite entry logs whose live fraction is below ``threshold``
        (default ``config.compaction_threshold``); returns bytes reclaimed."""
        if threshold is None:
            threshold = self.config.compaction_threshold
        result = await self._in_storage(self._storage.compact, threshold)
        self.metrics.compaction_reclaimed.inc(max(result.reclaimed_bytes, 0))
        return result.reclaimed_bytes

    async def checkpoint(self) -> None:
        """Flush ledger storage and move the journal mark (see module docstring)."""
        while self._checkpoint_task is not None:
            try:
                await asyncio.shield(self._checkpoint_task)
            except StorageError:
                pass  # that one's snapshot was folded back; ours retries it
        await asyncio.shield(self._start_checkpoint())

    def _start_checkpoint(self) -> asyncio.Task:
        # Both lanes' positions before the swap: everything they cover is in this snapshot or an earlier one.
        position = self._journal.synced_position
        snapshot = self._storage.begin_flush()
        task = self._loop.create_task(self._finish_checkpoint(snapshot, position))
        task.add_done_callback(_log_checkpoint_failure)
        self._checkpoint_task = task
        return task

    async def _finish_checkpoint(self, snapshot: FlushSnapshot, position: LaneMarks) -> None:
        started = time.perf_counter()
        try:
            ok = False
            try:
                if not snapshot.empty:
                    await self._in_storage(self._storage.flush, snapshot)
                ok = True
            finally:
                self._storage.end_flush(snapshot, ok)
            if position != self._mark:
                await self._in_storage(self._journal.advance_marks, position, self._mark)
                self._mark = position
        finally:
            self._checkpoint_task = None
        self.metrics.checkpoint_latency.observe(time.perf_counter() - started)

    async def _checkpoint_periodically(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval_s)  # a timer, not synchronisation
            if self._storage.has_unflushed or self._journal.synced_position != self._mark:
                try:
                    await self.checkpoint()
                except StorageError as exc:
                    log.error("periodic checkpoint failed: %s", exc)

    def disk_usage_bytes(self) -> int:
        """Bytes in the journal and ledger directories (each counted once)."""
        dirs = {Path(os.path.abspath(self.config.journal_dir)), Path(os.path.abspath(self.config.ledger_dir))}
        roots = [d for d in dirs if not any(o != d and o in d.parents for o in dirs)]
        return sum(tree_size_bytes(d) for d in roots)

    @property
    def journal_failed(self) -> BaseException | None:
        """Set once a journal write/fsync failed; the bookie then refuses adds
        (the server should go read-only or stop)."""
        return self._journal.failed if self._journal is not None else None

    # ---- lifecycle -------------------------------------------------------

    async def close(self) -> None:
        """Finish queued journal writes, checkpoint, close files. Idempotent."""
        if self._closing:
            return
        self._closing = True
        if self._periodic is not None:
            self._periodic.cancel()
        try:
            await self._journal.close()
            await self.checkpoint()
        except StorageError as exc:
            log.error("final checkpoint failed; the journal will be replayed on restart: %s", exc)
        finally:
            await self._abandon()

    async def halt(self) -> None:
        """Stop without flushing ledger storage or writing queued records --
        what a crash leaves on disk (the write cache is lost; the journal has
        every acknowledged add). For fault-injection tests."""
        if self._closing:
            return
        self._closing = True
        if self._periodic is not None:
            self._periodic.cancel()
        if self._checkpoint_task is not None:
            await asyncio.gather(self._checkpoint_task, return_exceptions=True)
        await self._journal.halt()
        await self._abandon()

    async def _abandon(self) -> None:
        if self._journal is not None:
            await self._journal.halt()
        # Let reads in flight finish before their index and files close.
        await asyncio.to_thread(self._read_pool.shutdown)
        if self._storage is not None:
            await self._loop.run_in_executor(self._storage_thread, self._storage.close)
        self._storage_thread.shutdown(wait=False)
        for fd in self._lock_fds:
            os.close(fd)  # releases the flock
        self._lock_fds = []

    # ---- threads ---------------------------------------------------------

    async def _in_storage(self, fn, *args):
        try:
            return await self._loop.run_in_executor(self._storage_thread, fn, *args)
        except OSError as exc:
            raise BookieInternalError(f"ledger storage I/O failed: {exc}") from exc

    async def _in_read_pool(self, fn, *args):
        try:
            return await self._loop.run_in_executor(self._read_pool, fn, *args)
        except OSError as exc:
            raise BookieInternalError(f"ledger storage read failed: {exc}") from exc


LOCK_FILE = "bookie.lock"


def _lock_dirs(dirs: list[Path]) -> list[int]:
    """Create the directories and flock them: two bookies (or two Bookie
    objects in one process) writing one journal would corrupt it."""
    fds: list[int] = []
    try:
        for d in dict.fromkeys(Path(os.path.abspath(x)) for x in dirs):
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise BookieStartupError(f"{d} is in use by another bookie") from exc
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _consume(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: the awaited record that follows reports the failure


def _log_checkpoint_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("checkpoint failed: %s", task.exception())
