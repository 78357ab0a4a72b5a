"""Where a durable cursor's state is written: its cursor ledger and its metadata-store snapshot.

How it works (Pulsar's scheme, without its cap): every change appends the
cursor's whole state to the cursor's own ledger as one or more chunk entries
(cursor_state.py frames them); the metadata node holds a snapshot naming that
ledger. Changes made while a write is in flight are coalesced into the next
write, and each caller's future resolves once a write containing its change
is durable. The cursor ledger is replaced after
``cursor_max_entries_per_ledger`` entries or ``cursor_max_size_per_ledger_mb``,
and after any failed write (a state is never continued in a ledger where one
of its chunks failed): the new ledger gets the state first, then the snapshot
is pointed at it by a conditional write (a conflict fences the managed
ledger), then the old ledger is deleted. ``read_latest_state`` finds the
last complete state in a cursor ledger when a cursor is restored.

What may change its state: only ``persist`` (through its flush task) and
``close``. The cursor's ack state is read, never changed, here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from storage.client import api
from storage.errors import BadVersionError, CursorStateCorruptError, ManagedLedgerFencedError, NoNodeError, StorageError
from storage.managed_ledger.conditional_write import set_conditionally
from storage.managed_ledger.cursor_state import (
    Chunk, CursorState, decode_state, encode_state, frame_chunks, join_chunks, parse_entry, previous_final_chunk,
    snapshot_doc,
)

if TYPE_CHECKING:
    from storage.managed_ledger.cursor import ManagedCursor

log = logging.getLogger(__name__)


class CursorLedger:
    """The persistence of one durable cursor."""

    def __init__(self, cursor: "ManagedCursor"):
        self.cursor = cursor
        self.ledger: api.WriteHandle | None = None  # cursor ledger being written
        self._entries = 0
        self._bytes = 0
        self._broken = False  # a chunk failed: the next state goes to a new ledger
        self.old_ledger_id: int | None = None  # restored from; deleted once a new one is in the snapshot
        self.node_version = -1
        self.node_bytes: bytes | None = None  # what the node held at node_version, when known
        self._pending_flush: asyncio.Future | None = None
        self._flusher: asyncio.Task | None = None
        self.writes = 0  # states written (stats, tests)

    def snapshot(self, ledger_id: int, state: dict | None = None) -> bytes:
        """The metadata node's document: the cursor ledger's id and a snapshot of the state."""
        if state is None:
            state = self._snapshot_doc_of(self.cursor._state())
        return json.dumps({"cursor_ledger": ledger_id, "state": state}).encode()

    def _snapshot_doc_of(self, state: CursorState) -> dict:
        return snapshot_doc(state, self.cursor.ml.config.max_unacked_ranges_to_persist_in_metadata_store)

    # ---- writes ----------------------------------------------------------------------

    def persist(self) -> asyncio.Future:
        """Schedule a durable write of the current state; the future resolves once it (or a later one) is stored."""
        loop = asyncio.get_running_loop()
        if self._pending_flush is None:
            self._pending_flush = loop.create_future()
        fut = self._pending_flush
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush_loop())
        return fut

    async def _flush_loop(self) -> None:
        while self._pending_flush is not None:
            fut, self._pending_flush = self._pending_flush, None
            try:
                await self._write_state()
            except BaseException as exc:
                if not fut.done():
                    fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                if not fut.done():
                    fut.set_result(None)

    async def _write_state(self) -> None:
        # Everything is taken from memory before the first await: later changes go into the next write.
        c = self.cursor.ml.config
        state = self.cursor._next_state()
        chunks = frame_chunks(encode_state(state), state.seq, c.cursor_state_chunk_bytes)
        size = sum(map(len, chunks))
        if (self.ledger is None or self._broken or self._entries + len(chunks) > c.cursor_max_entries_per_ledger
                or self._bytes + size > c.cursor_max_size_per_ledger_mb * 1024 * 1024):
            snapshot = self._snapshot_doc_of(state)
            await self._switch_ledger(chunks, size, snapshot)
        else:
            await self._add_chunks(self.ledger, chunks)
            self._entries += len(chunks)
            self._bytes += size
        self.writes += 1
        self.cursor.persisted_mark_delete_position = state.mark_delete  # writes are one at a time, in order

    async def _add_chunks(self, ledger: api.WriteHandle, chunks: list[bytes]) -> None:
        hooks = self.cursor.ml.factory.hooks
        try:
            for index, chunk in enumerate(chunks):
                await hooks.before_cursor_chunk(self.cursor, ledger.ledger_id, index, len(chunks))
                await ledger.add_entry(chunk)
        except BaseException:
            if ledger is self.ledger:
                self._broken = True
            raise

    async def _switch_ledger(self, chunks: list[bytes], size: int, snapshot: dict) -> None:
        cursor, ml = self.cursor, self.cursor.ml
        c = ml.config
        new = await ml.client.create_ledger(c.ensemble_size, c.write_quorum_size, c.ack_quorum_size,
                                            password=ml.factory.passwords.cursor_ledger(ml.name, cursor.name),
                                            custom={"managed-ledger-cursor": f"{ml.name}/{cursor.name}"})
        try:
            await self._add_chunks(new, chunks)
        except StorageError:
            await self._discard_ledger(new)
            raise
        data = self.snapshot(new.ledger_id, snapshot)
        try:
            stat = await set_conditionally(ml.store, ml.cursor_path(cursor.name), data, self.node_version, self.node_bytes)
        except (BadVersionError, NoNodeError) as exc:
            ml.fence(exc)
            await self._discard_ledger(new)
            raise ManagedLedgerFencedError(f"cursor {cursor.name} of {ml.name} changed under us") from exc
        self.node_version, self.node_bytes = stat.version, data
        old, self.ledger = self.ledger, new
        self._entries, self._bytes, self._broken = len(chunks), size, False
        stale = [old.ledger_id] if old is not None else []
        if self.old_ledger_id is not None:
            stale.append(self.old_ledger_id)
            self.old_ledger_id = None
        if old is not None:
            try:
                await old.close()
            except StorageError:
                pass
        for ledger_id in stale:
            try:
                await ml.client.delete_ledger(ledger_id)
            except StorageError as exc:
                log.warning("deleting old cursor ledger %d: %s", ledger_id, exc)

    async def _discard_ledger(self, handle: api.WriteHandle) -> None:
        """A new cursor ledger that never made it into the snapshot: nothing refers to it."""
        try:
            await handle.close()
        except StorageError:
            pass
        try:
            await self.cursor.ml.client.delete_ledger(handle.ledger_id)
        except StorageError as exc:
            log.warning("deleting unused cursor ledger %d: %s", handle.ledger_id, exc)

    # ---- closing -----------------------------------------------------------------------

    async def wait_flushed(self) -> None:
        """Wait for the write in progress (its failure is its callers' to see, not the closer's)."""
        if self._flusher is not None and not self._flusher.done():
            try:
                await self._flusher
            except (StorageError, asyncio.CancelledError):
                pass

    async def close(self) -> None:
        if self.ledger is not None:
            try:
                await self.ledger.close()
            except StorageError:
                pass

    def ledger_ids(self) -> list[int]:
        """Cursor ledgers this cursor knows of (to delete with it)."""
        return [lid for lid in (self.ledger.ledger_id if self.ledger else None, self.old_ledger_id) if lid is not None]


async def read_latest_state(handle: api.ReadHandle) -> CursorState | None:
    """The last complete state in a cursor ledger (None if it has none); see cursor_state.py for the walk."""
    entry_id = handle.last_add_confirmed
    while entry_id >= 0:
        last = parse_entry((await handle.read_entry(entry_id)).payload)
        if isinstance(last, CursorState):
            return last  # format 1: one entry, one state
        if last.index != last.count - 1:
            entry_id = previous_final_chunk(entry_id, last)
            continue
        first = entry_id - last.count + 1
        if first < 0:
            raise CursorStateCorruptError(f"cursor ledger {handle.ledger_id}: state {last.seq} has {last.count} chunks "
                                       f"but only {entry_id + 1} entries precede it")
        chunks: list[Chunk] = []
        if first < entry_id:
            for entry in await handle.read_entries(first, entry_id - 1):
                chunk = parse_entry(entry.payload)
                if not isinstance(chunk, Chunk):
                    raise CursorStateCorruptError(f"cursor ledger {handle.ledger_id}: entry {entry.entry_id} is not a chunk")
                chunks.append(chunk)
        return decode_state(join_chunks([*chunks, last]))
    return None
