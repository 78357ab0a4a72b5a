"""The bookie's entry index and per-ledger state, in LMDB.

Why LMDB: it is a B+tree with copy-on-write pages and an fsync'd commit, so
a crash leaves either the previous or the new committed state and never
needs a recovery pass; readers run lock-free against a snapshot while the
one writer commits; lookups are a few microseconds from the page cache; and
there is no background compaction to stall writes, which suits an index that
is written in large batches at checkpoints and read all the time. RocksDB is
the usual alternative, but its Python bindings are poorly maintained.

Three named databases in ``<ledger_dir>/index``:

    entries  key (ledger_id u64, entry_id u64) big-endian -> (log_id u64, offset u64, length u32)
    ledgers  key ledger_id u64 -> state: flags u8 (1 fenced, 2 has key), lac i64,
             last entry id i64, key length u16, master key
    logs     key (log_id u64, ledger_id u64) -> u64 bytes of that ledger's live records in that log

Big-endian keys sort by (ledger, entry), so a ledger's entries are one range.
``logs`` is what compaction reads to find mostly-dead entry logs without
scanning every index entry; it is kept exact: an overwritten entry's old
bytes are subtracted, a deleted ledger's rows are removed, a compacted log's
rows move to the log its entries were copied to.

Writes happen only on the bookie's storage thread, in transactions committed
with sync (the environment is opened ``sync=True``); reads may come from
any thread. lmdb errors are translated to BookieInternalError here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable

import lmdb

from storage.bookie.entrylog import RECORD_OVERHEAD, EntryLocation
from storage.errors import BookieInternalError

# LMDB reserves address space, not disk, for the map: the file grows only as
# pages are used. 64 GiB holds roughly a billion index entries.
DEFAULT_MAP_SIZE_BYTES = 64 * 1024**3

_KEY = struct.Struct(">QQ")
_LEDGER_KEY = struct.Struct(">Q")
_LOCATION = struct.Struct(">QQI")
_STATE = struct.Struct(">BqqH")
_USAGE = struct.Struct(">Q")

_FENCED = 1
_HAS_KEY = 2


class LedgerDescriptor:
    """What the bookie knows about one ledger besides its entries: master key, fenced, LAC, last entry id.

    BookKeeper's bookie-side name; the ledger's lifecycle (OPEN, IN_RECOVERY, CLOSED) is
    ``storage.ledger_metadata.LedgerState``, which lives in the metadata store, not here.
    """

    __slots__ = ("fenced", "master_key", "lac", "last_entry_id")

    def __init__(self, master_key: bytes | None = None, fenced: bool = False, lac: int = -1, last_entry_id: int = -1):
        self.master_key = master_key
        self.fenced = fenced
        self.lac = lac
        self.last_entry_id = last_entry_id

    def copy(self) -> "LedgerDescriptor":
        return LedgerDescriptor(self.master_key, self.fenced, self.lac, self.last_entry_id)

    def encode(self) -> bytes:
        flags = (_FENCED if self.fenced else 0) | (_HAS_KEY if self.master_key is not None else 0)
        key = self.master_key or b""
        return _STATE.pack(flags, self.lac, self.last_entry_id, len(key)) + key

    @classmethod
    def decode(cls, raw: bytes) -> "LedgerDescriptor":
        flags, lac, last, key_len = _STATE.unpack_from(raw)
        key = bytes(raw[_STATE.size : _STATE.size + key_len]) if flags & _HAS_KEY else None
        return cls(key, bool(flags & _FENCED), lac, last)

    def __eq__(self, other) -> bool:
        return isinstance(other, LedgerDescriptor) and (
            (self.master_key, self.fenced, self.lac, self.last_entry_id)
            == (other.master_key, other.fenced, other.lac, other.last_entry_id)
        )

    def __repr__(self) -> str:
        return (
            f"LedgerDescriptor(fenced={self.fenced}, lac={self.lac}, last_entry_id={self.last_entry_id}, "
            f"has_key={self.master_key is not None})"
        )


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, entry_id)


class LedgerIndex:
    """The LMDB environment of one ledger directory. See the module docstring."""

    def __init__(self, path: Path, *, map_size_bytes: int = DEFAULT_MAP_SIZE_BYTES):
        path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(
                str(path), map_size=map_size_bytes, max_dbs=3, sync=True, metasync=True, readahead=False
            )
            self._entries = self._env.open_db(b"entries")
            self._ledgers = self._env.open_db(b"ledgers")
            self._logs = self._env.open_db(b"logs")
        except lmdb.Error as exc:
            raise BookieInternalError(f"cannot open index at {path}: {exc}") from exc

    def close(self) -> None:
        self._env.close()

    # -- reads (any thread) ---------------------------------------------

    def get(self, ledger_id: int, entry_id: int) -> EntryLocation | None:
        try:
            with self._env.begin(db=self._entries) as txn:
                raw = txn.get(_KEY.pack(ledger_id, entry_id))
        except lmdb.Error as exc:
            raise BookieInternalError(f"index read failed: {exc}") from exc
        return None if raw is None else EntryLocation(*_LOCATION.unpack(raw))

    def consecutive(self, ledger_id: int, first: int, last: int) -> list[tuple[int, EntryLocation]]:
        """Locations of entries first, first+1, ... up to last, stopping at the first gap."""
        out: list[tuple[int, EntryLocation]] = []
        try:
            with self._env.begin(db=self._entries) as txn:
                cursor = txn.cursor()
                if not cursor.set_key(_KEY.pack(ledger_id, first)):
                    return out
                expected = first
                for key, value in cursor:
                    led, ent = _KEY.unpack(key)
                    if led != ledger_id or ent != expected or ent > last:
                        break
                    out.append((ent, EntryLocation(*_LOCATION.unpack(value))))
                    expected += 1
        except lmdb.Error as exc:
            raise BookieInternalError(f"index read failed: {exc}") from exc
        return out

    def load_states(self) -> dict[int, LedgerDescriptor]:
        with self._env.begin(db=self._ledgers) as txn:
            return {_LEDGER_KEY.unpack(k)[0]: LedgerDescriptor.decode(v) for k, v in txn.cursor()}

    def log_usage(self) -> dict[int, int]:
        """log_id -> bytes of live records in it (per the index)."""
        usage: dict[int, int] = {}
        with self._env.begin(db=self._logs) as txn:
            for key, value in txn.cursor():
                log_id, _ledger = _KEY.unpack(key)
                usage[log_id] = usage.get(log_id, 0) + _USAGE.unpack(value)[0]
        return usage

    def entry_count(self) -> int:
        with self._env.begin(db=self._entries) as txn:
            return txn.stat(self._entries)["entries"]

    # -- writes (storage thread) ----------------------------------------

    def commit_flush(
        self,
        placed: Iterable[tuple[int, int, EntryLocation]],
        states: dict[int, LedgerDescriptor],
    ) -> None:
        """Record where flushed entries now live, and the ledgers' states, in
        one synced commit. An entry written again (a recovery add re-sending
        what this bookie had) replaces the old location, whose bytes stop
        counting as live."""
        try:
            with self._env.begin(write=True) as txn:
                usage: dict[tuple[int, int], int] = {}
                for ledger_id, entry_id, loc in placed:
                    key = _KEY.pack(ledger_id, entry_id)
                    old = txn.get(key, db=self._entries)
                    if old is not None:
                        old_log, _off, old_len = _LOCATION.unpack(old)
                        k = (old_log, ledger_id)
                        usage[k] = usage.get(k, 0) - (old_len + RECORD_OVERHEAD)
                    txn.put(key, _LOCATION.pack(*loc), db=self._entries)
                    k = (loc.log_id, ledger_id)
                    usage[k] = usage.get(k, 0) + loc.length + RECORD_OVERHEAD
                self._add_usage(txn, usage)
                for ledger_id, state in states.items():
                    txn.put(_LEDGER_KEY.pack(ledger_id), state.encode(), db=self._ledgers)
        except lmdb.Error as exc:
            raise BookieInternalError(f"index commit failed: {exc}") from exc

    def delete_ledger(self, ledger_id: int) -> int:
        """Drop a ledger's entries, state and usage rows. Returns entries dropped."""
        dropped = 0
        try:
            with self._env.begin(write=True) as txn:
                cursor = txn.cursor(db=self._entries)
                prefix = _LEDGER_KEY.pack(ledger_id)
                if cursor.set_range(_KEY.pack(ledger_id, 0)):
                    while cursor.key()[:8] == prefix:
                        cursor.delete()
                        dropped += 1
                txn.delete(prefix, db=self._ledgers)
                doomed = [k for k, _v in txn.cursor(db=self._logs) if _KEY.unpack(k)[1] == ledger_id]
                for key in doomed:
                    txn.delete(key, db=self._logs)
        except lmdb.Error as exc:
            raise BookieInternalError(f"index delete failed: {exc}") from exc
        return dropped

    def relocate(self, moves: list[tuple[int, int, EntryLocation]], from_log: int) -> None:
        """After compaction copied ``from_log``'s live entries: point them at
        their copies and move the log's usage rows, in one synced commit."""
        try:
            with self._env.begin(write=True) as txn:
                usage: dict[tuple[int, int], int] = {}
                for ledger_id, entry_id, loc in moves:
                    txn.put(_KEY.pack(ledger_id, entry_id), _LOCATION.pack(*loc), db=self._entries)
                    k = (loc.log_id, ledger_id)
                    usage[k] = usage.get(k, 0) + loc.length + RECORD_OVERHEAD
                self._drop_log_rows(txn, from_log)
                self._add_usage(txn, usage)
        except lmdb.Error as exc:
            raise BookieInternalError(f"index commit failed: {exc}") from exc

    def drop_log(self, log_id: int) -> None:
        """Forget a deleted entry log's usage rows."""
        try:
            with self._env.begin(write=True) as txn:
                self._drop_log_rows(txn, log_id)
        except lmdb.Error as exc:
            raise BookieInternalError(f"index commit failed: {exc}") from exc

    def _drop_log_rows(self, txn, log_id: int) -> None:
        cursor = txn.cursor(db=self._logs)
        prefix = _LEDGER_KEY.pack(log_id)
        if cursor.set_range(_KEY.pack(log_id, 0)):
            while cursor.key()[:8] == prefix:
                cursor.delete()

    def _add_usage(self, txn, usage: dict[tuple[int, int], int]) -> None:
        for (log_id, ledger_id), delta in usage.items():
            if delta == 0:
                continue
            key = _KEY.pack(log_id, ledger_id)
            old = txn.get(key, db=self._logs)
            total = (_USAGE.unpack(old)[0] if old is not None else 0) + delta
            if total > 0:
                txn.put(key, _USAGE.pack(total), db=self._logs)
            elif old is not None:
                txn.delete(key, db=self._logs)
