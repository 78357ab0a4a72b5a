"""ManagedCursor: a reader's position in a managed ledger and what it has acknowledged.

State: the mark-delete position (everything at or before it is consumed),
the individually deleted entries after it, acknowledged batch indexes of
partly consumed batches, and properties stored with the mark-delete (dedup
snapshots use them). The read position is where the next read starts; it is
not persisted (after a restart reading resumes after the mark-delete).

The individually deleted entries are an ``AckRanges`` (runs per ledger,
O(log n) membership) and batch-index acks a bitmask per entry, so neither a
read nor an ack does work in proportion to the number of holes.

Durability (Pulsar's scheme, without its cap): every change appends the
whole state to the cursor's own ledger, as one or more chunk entries
(cursor_state.py); the metadata store holds a snapshot naming that ledger.
Changes made while a write is in flight are coalesced into the next write,
and each caller's await returns once a write containing its change is
durable. Restoring opens the cursor ledger with recovery (fencing any old
writer) and reads the last *complete* state from its tail, so the state
comes back exactly, however many holes it has. The cursor ledger is replaced
after ``cursor_max_entries_per_ledger`` entries or
``cursor_max_size_per_ledger_mb``, and after any failed write (a state is
never continued in a ledger where one of its chunks failed).

Lifecycle: OPEN -> CLOSED -> DELETED (durable cursors), through the table in
lifecycle.py: ``close`` and ``delete_persisted`` here are the only changes.
The acknowledgement methods, ``seek``, ``rewind``, ``reset`` and reads change
the positions and ack state; the cursor ledger and snapshot change only in
the persistence methods (``_write_state`` and what it calls). Ledgers are
reached only through storage.client.api.
"""

from __future__ import annotations

import asyncio
import json
import logging

from storage.errors import (
    BadVersionError, CursorNotFoundError, CursorStateCorruptError, ManagedLedgerClosedError, ManagedLedgerFencedError,
    NodeExistsError, NoNodeError, NoSuchLedgerError, StorageError,
)
from storage.client import api
from storage.managed_ledger.ack_ranges import AckRanges
from storage.managed_ledger.cursor_state import (
    Chunk, CursorState, decode_state, encode_state, frame_chunks, join_chunks, mask_indexes, parse_entry,
    previous_final_chunk, snapshot_doc, snapshot_is_complete, state_from_doc,
)
from storage.managed_ledger.lifecycle import ManagedCursorState, cursor_lifecycle
from storage.managed_ledger.position import Entry, InitialPosition, Position

log = logging.getLogger(__name__)

# Bounds the bitmask a client's batch size can make us keep for one entry (1 Mi messages, 128 KiB).
MAX_BATCH_INDEXES = 1 << 20
# Acked entries between two wanted ones are read (and dropped) when at most this many: one read of a
# range instead of one round trip per entry when every other entry is acked.
READ_GAP_FILL = 16


def fill_small_gaps(positions: list[Position], max_gap: int) -> list[Position]:
    """``positions`` (sorted) plus the positions between two of them in one ledger at most ``max_gap`` apart."""
    out: list[Position] = []
    for p in positions:
        if out and out[-1].ledger_id == p.ledger_id and 0 < p.entry_id - out[-1].entry_id - 1 <= max_gap:
            out.extend(Position(p.ledger_id, e) for e in range(out[-1].entry_id + 1, p.entry_id))
        out.append(p)
    return out


class ManagedCursor:
    def __init__(self, ml, name: str | None, mark_delete: Position, *, durable: bool = True):
        self.ml = ml
        self.name = name
        self.durable = durable
        self.mark_delete_position = Position(*mark_delete)
        self.read_position = ml.position_after(self.mark_delete_position)
        self.deleted = AckRanges()
        self.batch_deleted: dict[Position, int] = {}  # bitmask of acked batch indexes, for partly acked entries
        self.properties: dict[str, int] = {}
        self._lifecycle = cursor_lifecycle(f"cursor {name} of {ml.name}")
        self._ledger: api.WriteHandle | None = None  # cursor ledger being written
        self._ledger_entries = 0
        self._ledger_bytes = 0
        self._ledger_broken = False  # a chunk failed: the next state goes to a new ledger
        self._seq = 0
        self._old_ledger_id: int | None = None  # restored from; deleted once a new one is in the snapshot
        self._node_version = -1
        self._pending_flush: asyncio.Future | None = None
        self._flusher: asyncio.Task | None = None
        self._trimmed_at: int | None = None  # the first ack after loading always offers a trim

    # ---- create / restore --------------------------------------------------------

    @classmethod
    async def create(cls, ml, name: str, initial: InitialPosition) -> "ManagedCursor":
        mark = ml.last_confirmed_entry if initial is InitialPosition.LATEST else ml.position_before(ml.first_position)
        cursor = cls(ml, name, mark)
        try:
            await ml.store.create(ml.cursor_path(name), cursor._snapshot(-1), make_parents=True)
        except NodeExistsError:
            return await cls.restore(ml, name)
        cursor._node_version = 0
        return cursor

    @classmethod
    async def restore(cls, ml, name: str) -> "ManagedCursor":
        try:
            data, stat = await ml.store.get(ml.cursor_path(name))
        except NoNodeError as exc:
            raise CursorNotFoundError(f"cursor {name!r} of {ml.name} does not exist") from exc
        doc = json.loads(data)
        state, from_ledger = state_from_doc(doc["state"]), False
        ledger_id = doc.get("cursor_ledger", -1)
        if ledger_id >= 0:
            try:
                handle = await ml.client.open_ledger(ledger_id, recovery=True, password=ml.config.password)
                try:
                    latest = await _read_latest_state(handle)
                finally:
                    await handle.close()
                if latest is not None:
                    state, from_ledger = latest, True
            except NoSuchLedgerError:
                log.warning("cursor %s of %s: its ledger %d is gone; using the snapshot", name, ml.name, ledger_id)
        try:
            # Rewriting the node moves its version on: a previous owner still running cannot point it at a
            # cursor ledger of its own any more (its conditional write fails and fences it).
            stat = await ml.store.set(ml.cursor_path(name), data, stat.version)
        except (BadVersionError, NoNodeError) as exc:
            ml.fence(exc)
            raise ManagedLedgerFencedError(f"cursor {name} of {ml.name} changed while it was restored") from exc
        if not from_ledger and not snapshot_is_complete(doc["state"]):
            log.warning("cursor %s of %s: only the mark-delete position could be restored; entries acknowledged "
                        "individually after it will be delivered again", name, ml.name)
        cursor = cls(ml, name, state.mark_delete)
        cursor.deleted = state.deleted
        cursor.batch_deleted = state.batch_deleted
        cursor.properties = dict(state.properties)
        cursor._seq = state.seq
        cursor.read_position = ml.position_after(cursor.mark_delete_position)
        cursor._old_ledger_id = ledger_id if ledger_id >= 0 else None
        cursor._node_version = stat.version
        return cursor

    def _state(self) -> CursorState:
        return CursorState(self.mark_delete_position, self.deleted, self.batch_deleted, dict(self.properties), self._seq)

    def _snapshot(self, ledger_id: int, state: dict | None = None) -> bytes:
        if state is None:
            state = self._snapshot_doc_of(self._state())
        return json.dumps({"cursor_ledger": ledger_id, "state": state}).encode()

    # ---- persistence -------------------------------------------------------------

    def _persist(self) -> asyncio.Future:
        """Schedule a durable write of the current state; the future resolves once it (or a later one) is stored."""
        loop = asyncio.get_running_loop()
        if not self.durable:
            fut = loop.create_future()
            fut.set_result(None)
            return fut
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
        c = self.ml.config
        self._seq += 1
        state = self._state()
        chunks = frame_chunks(encode_state(state), state.seq, c.cursor_state_chunk_bytes)
        size = sum(map(len, chunks))
        if (self._ledger is None or self._ledger_broken or self._ledger_entries + len(chunks) > c.cursor_max_entries_per_ledger
                or self._ledger_bytes + size > c.cursor_max_size_per_ledger_mb * 1024 * 1024):
            snapshot = self._snapshot_doc_of(state)
            await self._switch_ledger(chunks, size, snapshot)
            return
        await self._add_chunks(self._ledger, chunks)
        self._ledger_entries += len(chunks)
        self._ledger_bytes += size

    def _snapshot_doc_of(self, state: CursorState) -> dict:
        return snapshot_doc(state, self.ml.config.max_unacked_ranges_to_persist_in_metadata_store)

    async def _add_chunks(self, ledger: api.WriteHandle, chunks: list[bytes]) -> None:
        hooks = self.ml.factory.hooks
        try:
            for index, chunk in enumerate(chunks):
                await hooks.before_cursor_chunk(self, ledger.ledger_id, index, len(chunks))
                await ledger.add_entry(chunk)
        except BaseException:
            if ledger is self._ledger:
                self._ledger_broken = True
            raise

    async def _switch_ledger(self, chunks: list[bytes], size: int, snapshot: dict) -> None:
        c = self.ml.config
        new = await self.ml.client.create_ledger(c.ensemble_size, c.write_quorum_size, c.ack_quorum_size,
                                                 password=c.password, custom={"managed-ledger-cursor": f"{self.ml.name}/{self.name}"})
        try:
            await self._add_chunks(new, chunks)
        except StorageError:
            await self._discard_ledger(new)
            raise
        try:
            stat = await self.ml.store.set(self.ml.cursor_path(self.name), self._snapshot(new.ledger_id, snapshot), self._node_version)
        except (BadVersionError, NoNodeError) as exc:
            self.ml.fence(exc)
            await self._discard_ledger(new)
            raise ManagedLedgerFencedError(f"cursor {self.name} of {self.ml.name} changed under us") from exc
        self._node_version = stat.version
        old, self._ledger = self._ledger, new
        self._ledger_entries, self._ledger_bytes, self._ledger_broken = len(chunks), size, False
        stale = [old.ledger_id] if old is not None else []
        if self._old_ledger_id is not None:
            stale.append(self._old_ledger_id)
            self._old_ledger_id = None
        if old is not None:
            try:
                await old.close()
            except StorageError:
                pass
        for ledger_id in stale:
            try:
                await self.ml.client.delete_ledger(ledger_id)
            except StorageError as exc:
                log.warning("deleting old cursor ledger %d: %s", ledger_id, exc)

    async def _discard_ledger(self, handle: api.WriteHandle) -> None:
        """A new cursor ledger that never made it into the snapshot: nothing refers to it."""
        try:
            await handle.close()
        except StorageError:
            pass
        try:
            await self.ml.client.delete_ledger(handle.ledger_id)
        except StorageError as exc:
            log.warning("deleting unused cursor ledger %d: %s", handle.ledger_id, exc)

    # ---- acknowledgements ------------------------------------------------------------

    @property
    def state(self) -> ManagedCursorState:
        return self._lifecycle.state

    def _check(self) -> None:
        if self.state is not ManagedCursorState.OPEN:
            raise ManagedLedgerClosedError(f"cursor {self.name} of {self.ml.name} is closed")
        self.ml.check_open()

    # The acknowledgement methods change the in-memory state *when called* and return an awaitable that
    # resolves once that state is durable: a redelivery decided right after an ack already sees it.

    def mark_delete(self, position, properties: dict[str, int] | None = None) -> asyncio.Future:
        """Everything up to ``position`` is consumed (cumulative ack); ``properties`` are stored with it."""
        self._check()
        position = min(Position(*position), self.ml.last_confirmed_entry)
        if properties is not None:
            self.properties = {k: int(v) for k, v in properties.items()}
        if position > self.mark_delete_position:
            self._set_mark_delete(position)
        return self._persisted()

    def delete(self, positions) -> asyncio.Future:
        """Individual acks: each position is consumed; runs next to the mark-delete position collapse into it.

        Positions come from clients: one that does not exist is ignored (it would count as acked forever).
        """
        self._check()
        last = self.ml.last_confirmed_entry
        sizes: dict[int, int] = {}  # entries per ledger, looked up once per call
        for p in positions:
            p = Position(*p)
            if p.ledger_id not in sizes:
                sizes[p.ledger_id] = self.ml.ledger_entries(p.ledger_id)
            if self.mark_delete_position < p <= last and 0 <= p.entry_id < sizes[p.ledger_id]:
                self.deleted.add(p.ledger_id, p.entry_id)
                if self.batch_deleted:
                    self.batch_deleted.pop(p, None)
        self._collapse()
        return self._persisted()

    def _exists(self, position: Position) -> bool:
        return 0 <= position.entry_id < self.ml.ledger_entries(position.ledger_id)

    def delete_batch_indexes(self, position, acked_indexes, batch_size: int) -> asyncio.Future:
        """Ack single messages of a batch entry; the entry is consumed once all ``batch_size`` are."""
        self._check()
        position = Position(*position)
        if self.is_deleted(position) or not position <= self.ml.last_confirmed_entry or not self._exists(position):
            return self._persisted()
        limit = min(batch_size, MAX_BATCH_INDEXES)
        acked = self.batch_deleted.get(position, 0)
        for i in acked_indexes:
            if 0 <= i < limit:
                acked |= 1 << i
        if acked.bit_count() >= batch_size:
            return self.delete([position])
        if acked:
            self.batch_deleted[position] = acked
        return self._persisted()

    def _persisted(self) -> asyncio.Future:
        fut = self._persist()
        fut.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self._after_ack())
        return fut

    def _set_mark_delete(self, position: Position) -> None:
        self.mark_delete_position = position
        self.deleted.remove_up_to(position.ledger_id, position.entry_id)
        if self.batch_deleted:
            self.batch_deleted = {p: v for p, v in self.batch_deleted.items() if p > position}
        self._collapse()
        if self.read_position <= position:
            self.read_position = self.ml.position_after(position)

    def _collapse(self) -> None:
        while self.deleted:
            nxt = self.ml.position_after(self.mark_delete_position)
            last = self.deleted.pop_run_at(nxt.ledger_id, nxt.entry_id)
            if last is None:
                break
            self.mark_delete_position = Position(nxt.ledger_id, last)
        if self.read_position <= self.mark_delete_position:
            self.read_position = self.ml.position_after(self.mark_delete_position)

    def _after_ack(self) -> None:
        # A ledger becomes trimmable when this cursor has consumed all of it, i.e. when its first unconsumed
        # entry moves to a later ledger (the mark-delete itself stays on a finished ledger's last entry).
        first_unconsumed = self.ml.position_after(self.mark_delete_position).ledger_id
        if self.durable and first_unconsumed != self._trimmed_at:
            self._trimmed_at = first_unconsumed
            self.ml.factory.spawn(self.ml.trim())

    def is_deleted(self, position) -> bool:
        position = Position(*position)
        return position <= self.mark_delete_position or self.deleted.contains(position[0], position[1])

    def batch_deleted_indexes(self, position) -> frozenset[int] | None:
        acked = self.batch_deleted.get(Position(*position))
        return mask_indexes(acked) if acked else None

    @property
    def individually_deleted_range_count(self) -> int:
        return self.deleted.range_count

    @property
    def individually_deleted_ranges(self) -> list[tuple[int, int, int]]:
        """(ledger, first entry, last entry) runs acknowledged after the mark-delete position."""
        return list(self.deleted.ranges())

    # ---- reading -------------------------------------------------------------------

    def has_more_entries(self) -> bool:
        return self.ml.normalize(self.read_position) < self.ml.next_position

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position, skipping consumed ones; [] at the end."""
        self._check()
        if max_entries <= 0:
            return []
        start = self.ml.normalize(max(self.read_position, self.ml.position_after(self.mark_delete_position)))
        wanted = self._unconsumed_from(start, max_entries)
        if not wanted:
            self.read_position = self.ml.next_position  # everything left is acknowledged
            return []
        began_at = self.read_position
        entries = await self.ml.read_entries_at(fill_small_gaps(wanted, READ_GAP_FILL))
        if len(entries) > len(wanted):
            keep = set(wanted)
            entries = [e for e in entries if e.position in keep]
        if self.read_position == began_at and entries:  # a seek during the read wins
            self.read_position = self.ml.position_after(entries[-1].position)
        return entries

    def _unconsumed_from(self, start: Position, limit: int) -> list[Position]:
        """Up to ``limit`` existing positions from ``start`` on that are not acknowledged: jumps over acked runs."""
        wanted: list[Position] = []
        for info in self.ml.info.ledgers:
            if info.ledger_id < start.ledger_id:
                continue
            first = start.entry_id if info.ledger_id == start.ledger_id else 0
            for lo, hi in self.deleted.unacked_runs(info.ledger_id, first, info.entries):
                take = min(hi - lo, limit - len(wanted))
                wanted.extend(Position(info.ledger_id, e) for e in range(lo, lo + take))
                if len(wanted) >= limit:
                    return wanted
        return wanted

    async def read_entries_or_wait(self, max_entries: int) -> list[Entry]:
        """Like read_entries, but waits for the next add at the end of the log. Cancelling leaves the cursor as it was."""
        while True:
            entries = await self.read_entries(max_entries)
            if entries:
                return entries
            await self.ml.wait_for_entries(self.read_position)
            self._check()

    def seek(self, position) -> None:
        """Move the read position only."""
        self.read_position = self.ml.normalize(Position(*position))

    def rewind(self) -> None:
        """Read again from just after the mark-delete position."""
        self.read_position = self.ml.position_after(self.mark_delete_position)

    async def reset(self, position) -> None:
        """Make ``position`` the next entry to read and forget acknowledgements at and after it."""
        self._check()
        position = self.ml.normalize(Position(*position))
        self.mark_delete_position = self.ml.position_before(position)
        self.deleted.clear()
        self.batch_deleted.clear()
        self.read_position = position
        await self._persist()

    async def find_newest_matching(self, predicate) -> Position | None:
        """The last entry for which ``predicate(entry)`` holds, assuming it holds for a prefix of the log."""
        lo, hi, found = 0, self.ml.number_of_entries - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            position = self.ml.position_at_index(mid)
            entries = await self.ml.read_entries_at([position]) if position is not None else []
            if entries and predicate(entries[0]):
                found, lo = position, mid + 1
            else:
                hi = mid - 1
        return found

    @property
    def backlog(self) -> int:
        last = self.ml.last_confirmed_entry
        between = self.ml.entries_between(self.mark_delete_position, last)
        return max(0, between - len(self.deleted))  # only existing entries are ever acked (see _exists)

    # ---- lifecycle ----------------------------------------------------------------

    async def close(self) -> None:
        if self.state is not ManagedCursorState.OPEN:
            return
        if self._flusher is not None and not self._flusher.done():
            try:
                await self._flusher
            except (StorageError, asyncio.CancelledError):
                pass
        if self.state is ManagedCursorState.OPEN:  # a concurrent close may have got here first
            self._lifecycle.to(ManagedCursorState.CLOSED)
        if not self.durable:
            self.ml.forget_non_durable(self)
        if self._ledger is not None:
            try:
                await self._ledger.close()
            except StorageError:
                pass

    async def delete_persisted(self) -> None:
        if self.state is ManagedCursorState.DELETED:
            return
        await self.close()
        if not self.durable:
            return
        ids = [lid for lid in (self._ledger.ledger_id if self._ledger else None, self._old_ledger_id) if lid is not None]
        try:
            data, _ = await self.ml.store.get(self.ml.cursor_path(self.name))
            ids.append(json.loads(data).get("cursor_ledger", -1))
            await self.ml.store.delete(self.ml.cursor_path(self.name))
        except NoNodeError:
            pass
        for ledger_id in {i for i in ids if i is not None and i >= 0}:
            try:
                await self.ml.client.delete_ledger(ledger_id)
            except StorageError:
                pass
        if self.state is ManagedCursorState.CLOSED:
            self._lifecycle.to(ManagedCursorState.DELETED)


async def _read_latest_state(handle: api.ReadHandle) -> CursorState | None:
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
