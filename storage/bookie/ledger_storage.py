"""Ledger storage: write cache, read cache, entry logs and index together.

How this works
--------------
An acknowledged add lands in the *write cache* (a dict, readable at once).
A flush -- the heart of a checkpoint -- swaps the write cache for an empty
one, appends the swapped-out entries to the current entry log sorted by
(ledger, entry) so each ledger's entries sit together, fsyncs the log, and
commits their locations and the ledgers' states to the index in one synced
LMDB transaction. Until that commit the entries are readable from the
swapped-out ("flushing") cache; once it returns they are durable without the
journal, which is what lets the bookie move its journal mark.

Reads try the write cache, the flushing cache, then an LRU *read cache*, and
only then the index and the entry log -- and every byte read from disk has
its digest verified: bit rot becomes EntryCorruptedOnDiskError, never data.

Threads: methods marked "loop" touch only memory and run on the event loop;
methods marked "storage thread" do blocking I/O and must run on the bookie's
single storage thread (flush, delete, compaction are serialised there, which
is what keeps them from racing each other); ``read``/``read_consecutive``
may run on any thread.

Deleting a ledger drops its index entries and state; its bytes stay in the
entry logs until compaction rewrites the live rest of a mostly-dead log
(``compact``) and deletes the file.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from storage import digest
from storage.bookie.config import BookieConfig
from storage.bookie.entrylog import RECORD_OVERHEAD, EntryLocation, EntryLogger
from storage.bookie.index import LedgerIndex, LedgerDescriptor
from storage.errors import (
    BookieInternalError,
    DigestMismatchError,
    EntryCorruptedOnDiskError,
    NoSuchEntryError,
)

# The share of the write cache kept for small entries (see write_cache_has_room): a quarter.
SMALL_ENTRY_HEADROOM_DIVISOR = 4

log = logging.getLogger(__name__)

EntryKey = tuple[int, int]  # (ledger_id, entry_id)


@dataclass
class FlushSnapshot:
    entries: dict[EntryKey, bytes]
    states: dict[int, LedgerDescriptor]
    bytes: int

    @property
    def empty(self) -> bool:
        return not self.entries and not self.states


@dataclass
class CompactionResult:
    reclaimed_bytes: int = 0
    deleted_logs: list[int] = field(default_factory=list)
    rewritten_logs: list[int] = field(default_factory=list)
    skipped_logs: list[int] = field(default_factory=list)  # usage did not match the scan: kept, logged


class ReadCache:
    """LRU of packaged entries read from disk, bounded in bytes. Loop only."""

    def __init__(self, max_bytes: int):
        self._max = max_bytes
        self._items: OrderedDict[EntryKey, bytes] = OrderedDict()
        self.bytes = 0

    def get(self, key: EntryKey) -> bytes | None:
        body = self._items.get(key)
        if body is not None:
            self._items.move_to_end(key)
        return body

    def put(self, key: EntryKey, body: bytes) -> None:
        if len(body) > self._max:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        self._items[key] = body
        self.bytes += len(body)
        while self.bytes > self._max:
            _key, evicted = self._items.popitem(last=False)
            self.bytes -= len(evicted)

    def discard(self, key: EntryKey) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= len(old)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._items if k[0] == ledger_id]:
            self.bytes -= len(self._items.pop(key))


class LedgerStorage:
    """Entries and ledger states of one bookie. See the module docstring."""

    def __init__(self, config: BookieConfig, *, on_entry_log_write: Callable[[int], None] | None = None):
        self.config = config
        config.ledger_dir.mkdir(parents=True, exist_ok=True)
        self.index = LedgerIndex(config.ledger_dir / "index")
        self.entry_logger = EntryLogger(
            config.ledger_dir, config.entry_log_max_file_size_bytes, on_write=on_entry_log_write,
            write_back_step_bytes=config.write_back_step_bytes,
        )
        self.states: dict[int, LedgerDescriptor] = self.index.load_states()
        self._active: dict[EntryKey, bytes] = {}
        self._active_bytes = 0
        self._flushing: dict[EntryKey, bytes] = {}
        self._dirty: set[int] = set()  # ledgers whose state changed since the last flush
        self.read_cache = ReadCache(config.read_cache_max_bytes)

    # -- loop -------------------------------------------------------------

    def put(self, ledger_id: int, entry_id: int, body: bytes, lac: int) -> None:
        """Add an acknowledged entry to the write cache and its ledger's state."""
        key = (ledger_id, entry_id)
        old = self._active.get(key)
        if old is not None:
            self._active_bytes -= len(old)
        self._active[key] = body
        self._active_bytes += len(body)
        state = self.states.get(ledger_id)
        if state is None:
            state = self.states[ledger_id] = LedgerDescriptor()
        if entry_id > state.last_entry_id:
            state.last_entry_id = entry_id
        if lac > state.lac:
            state.lac = lac
        self._dirty.add(ledger_id)

    def state_changed(self, ledger_id: int) -> None:
        """Persist this ledger's state (fence, key) at the next flush."""
        self._dirty.add(ledger_id)

    def cached(self, ledger_id: int, entry_id: int) -> tuple[bytes | None, bool]:
        """(body, from_write_cache) from memory, or (None, False)."""
        key = (ledger_id, entry_id)
        body = self._active.get(key)
        if body is None:
            body = self._flushing.get(key)
        if body is not None:
            return body, True
        return self.read_cache.get(key), False

    @property
    def write_cache_bytes(self) -> int:
        return self._active_bytes

    @property
    def write_cache_full(self) -> bool:
        return self._active_bytes >= self.config.write_cache_max_bytes

    def write_cache_has_room(self, entry_bytes: int) -> bool:
        """Whether an entry of ``entry_bytes`` may join the write cache now, or must wait for a flush.

        Entries of ``journal_large_record_bytes`` and more stop at three quarters of the cache; small ones only
        when it is full. While a flush runs, an add that finds no room waits for it to end (tens to hundreds of
        milliseconds of entry-log writes): without the headroom a writer of large entries that fills the cache
        faster than the disk drains it made every other writer's small adds wait for those flushes too. With it,
        the large writer meets the wait alone, and its pace becomes the disk's; small adds keep the last quarter
        (tests/bookie/test_write_cache_room.py)."""
        limit = self.config.write_cache_max_bytes
        if self.config.is_large_entry(entry_bytes):
            limit -= limit // SMALL_ENTRY_HEADROOM_DIVISOR
        return self._active_bytes < limit

    @property
    def has_unflushed(self) -> bool:
        return bool(self._active or self._dirty)

    def begin_flush(self) -> FlushSnapshot:
        """Swap out the write cache (and copy dirty states) for a flush."""
        if self._flushing:
            raise RuntimeError("a flush is already in progress")
        states = {lid: self.states[lid].copy() for lid in self._dirty if lid in self.states}
        snapshot = FlushSnapshot(self._active, states, self._active_bytes)
        self._flushing = self._active
        self._active, self._active_bytes, self._dirty = {}, 0, set()
        return snapshot

    def end_flush(self, snapshot: FlushSnapshot, ok: bool) -> None:
        """After ``flush(snapshot)`` ran: drop the flushing cache, or on
        failure fold it back so its entries stay readable and get retried."""
        self._flushing = {}
        if ok:
            return
        for key, body in snapshot.entries.items():
            if key not in self._active and key[0] in self.states:
                self._active[key] = body
                self._active_bytes += len(body)
        self._dirty.update(lid for lid in snapshot.states if lid in self.states)

    def forget_ledger(self, ledger_id: int) -> None:
        """Drop a ledger from memory; ``delete_ledger_on_disk`` does the rest."""
        self.states.pop(ledger_id, None)
        self._dirty.discard(ledger_id)
        for key in [k for k in self._active if k[0] == ledger_id]:
            self._active_bytes -= len(self._active.pop(key))
        self.read_cache.drop_ledger(ledger_id)

    # -- storage thread ---------------------------------------------------

    def flush(self, snapshot: FlushSnapshot) -> None:
        """Make a snapshot durable: entry log append + fsync, then index commit."""
        entries = snapshot.entries
        placed = [(lid, eid, self.entry_logger.append(lid, eid, entries[(lid, eid)])) for lid, eid in sorted(entries)]
        self.entry_logger.flush()
        self.index.commit_flush(placed, snapshot.states)

    def delete_ledger_on_disk(self, ledger_id: int) -> int:
        return self.index.delete_ledger(ledger_id)

    def compact(self, threshold: float) -> CompactionResult:
        """Rewrite entry logs whose live fraction is below ``threshold``.

        The live bytes per log come from the index's usage rows; a rewrite
        scans the log, copies each record the index still points at into the
        current log, commits the new locations, then deletes the old file. If
        the scan finds a different number of live bytes than the usage rows
        promise (a torn or corrupted record in the middle of the file hides
        the rest), the log is kept: deleting it could lose live entries.
        """
        result = CompactionResult()
        logger = self.entry_logger
        current = logger.current_log_id
        usage = self.index.log_usage()
        before = self._entry_log_bytes()
        for log_id in logger.log_ids():
            if log_id >= current:
                continue
            size = logger.file_size(log_id)
            live = usage.get(log_id, 0)
            if live and size and live / size >= threshold:
                continue
            copied = self._rewrite(log_id, live)
            if copied is None:
                result.skipped_logs.append(log_id)
                continue
            (result.rewritten_logs if copied else result.deleted_logs).append(log_id)
        # Measured, not estimated: copies may roll new logs with their own headers.
        result.reclaimed_bytes = before - self._entry_log_bytes()
        return result

    def _entry_log_bytes(self) -> int:
        return sum(self.entry_logger.file_size(i) for i in self.entry_logger.log_ids())

    def _rewrite(self, log_id: int, expected_live: int) -> int | None:
        """Copy a log's live records forward and delete it. Returns bytes
        copied, or None when it refused (see ``compact``)."""
        moves: list[tuple[int, int, EntryLocation]] = []
        found = 0
        for scanned in self.entry_logger.scan(log_id):
            old = EntryLocation(log_id, scanned.offset, scanned.length)
            if self.index.get(scanned.ledger_id, scanned.entry_id) != old:
                continue
            body = self.entry_logger.read(old)
            copy = self.entry_logger.append(scanned.ledger_id, scanned.entry_id, body)
            moves.append((scanned.ledger_id, scanned.entry_id, copy))
            found += scanned.length + RECORD_OVERHEAD
        if found != expected_live:
            log.error(
                "compaction: entry log %d should hold %d live bytes but a scan found %d; keeping it",
                log_id, expected_live, found,
            )
            if moves:
                self.entry_logger.flush()  # the copies are harmless dead bytes; keep the log consistent
            return None
        if moves:
            self.entry_logger.flush()
            self.index.relocate(moves, log_id)
        else:
            self.index.drop_log(log_id)
        self.entry_logger.delete(log_id)
        log.info("compaction: entry log %d removed, %d live bytes moved", log_id, found)
        return found

    def close(self) -> None:
        self.entry_logger.close()
        self.index.close()

    # -- any thread ---------------------------------------------------------

    def read(self, ledger_id: int, entry_id: int) -> bytes:
        """One entry from disk, digest-verified. Raises NoSuchEntryError,
        EntryCorruptedOnDiskError."""
        return self._verified(ledger_id, entry_id, self._read_location(ledger_id, entry_id, None))

    def read_consecutive(self, ledger_id: int, first: int, last: int, max_bytes: int, need_one: bool) -> list[bytes]:
        """Entries first.. from disk, stopping at a gap, at ``last``, or before
        ``max_bytes`` would be exceeded -- but with ``need_one`` the first entry
        is returned whatever its size. A corrupt entry ends the run; if it is
        the first one, EntryCorruptedOnDiskError is raised."""
        out: list[bytes] = []
        total = 0
        for entry_id, loc in self.index.consecutive(ledger_id, first, last):
            if (out or not need_one) and total + loc.length > max_bytes:
                break
            try:
                body = self._verified(ledger_id, entry_id, self._read_location(ledger_id, entry_id, loc))
            except (EntryCorruptedOnDiskError, NoSuchEntryError):
                if out:
                    break
                raise
            out.append(body)
            total += len(body)
        return out

    def _read_location(self, ledger_id: int, entry_id: int, loc: EntryLocation | None) -> bytes:
        # A location can go stale between lookup and read if compaction moves
        # the entry and deletes its log; the fresh lookup then finds the copy.
        for attempt in range(2):
            if loc is None:
                loc = self.index.get(ledger_id, entry_id)
                if loc is None:
                    raise NoSuchEntryError(f"ledger {ledger_id} has no entry {entry_id} on this bookie")
            try:
                body = self.entry_logger.read(loc)
            except FileNotFoundError as exc:
                if attempt:
                    raise BookieInternalError(f"entry log {loc.log_id} vanished while reading: {exc}") from exc
                loc = None
                continue
            except OSError as exc:
                raise BookieInternalError(f"reading entry log {loc.log_id} failed: {exc}") from exc
            if len(body) != loc.length:
                raise EntryCorruptedOnDiskError(
                    f"ledger {ledger_id} entry {entry_id}: entry log {loc.log_id} is truncated "
                    f"({len(body)} of {loc.length} bytes at offset {loc.offset})"
                )
            return body
        raise AssertionError("unreachable")

    @staticmethod
    def _verified(ledger_id: int, entry_id: int, body: bytes) -> bytes:
        try:
            digest.verify(body, ledger_id, entry_id)
        except DigestMismatchError as exc:
            raise EntryCorruptedOnDiskError(f"ledger {ledger_id} entry {entry_id} is corrupt on disk: {exc}") from exc
        return body

    def disk_usage_bytes(self) -> int:
        return tree_size_bytes(self.config.ledger_dir)


def tree_size_bytes(path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total
