"""ManagedCursor: a reader's position in a managed ledger and what it has acknowledged.

State: the mark-delete position (everything at or before it is consumed),
the individually deleted entries after it, acknowledged batch indexes of
partly consumed batches, and properties stored with the mark-delete (dedup
snapshots use them). The read position is where the next read starts; it is
not persisted (after a restart reading resumes after the mark-delete).

Durability (Pulsar's scheme): every change is appended as one msgpack entry
to the cursor's own ledger; the metadata store holds a snapshot naming that
ledger. Changes made while a write is in flight are coalesced into the next
write, and each caller's await returns once a write containing its change is
durable. Restoring opens the cursor ledger with recovery (fencing any old
writer) and reads its last entry, so the state comes back exactly. The
cursor ledger is replaced after ``cursor_max_entries_per_ledger`` writes.
"""

from __future__ import annotations

import asyncio
import json
import logging

import msgpack

from storage.errors import (
    BadVersionError, CursorNotFoundError, ManagedLedgerClosedError, ManagedLedgerFencedError, NodeExistsError,
    NoNodeError, NoSuchLedgerError, StorageError,
)
from storage.managed_ledger.metadata import CursorState, positions_to_ranges, ranges_to_positions
from storage.managed_ledger.position import Entry, InitialPosition, Position

log = logging.getLogger(__name__)


class ManagedCursor:
    def __init__(self, ml, name: str | None, mark_delete: Position, *, durable: bool = True):
        self.ml = ml
        self.name = name
        self.durable = durable
        self.mark_delete_position = Position(*mark_delete)
        self.read_position = ml.position_after(self.mark_delete_position)
        self.deleted: set[Position] = set()
        self.batch_deleted: dict[Position, set[int]] = {}
        self.properties: dict[str, int] = {}
        self._closed = False
        self._ledger = None  # cursor ledger being written
        self._ledger_entries = 0
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
        state = CursorState.from_doc(doc["state"])
        ledger_id = doc.get("cursor_ledger", -1)
        if ledger_id >= 0:
            try:
                handle = await ml.client.open_ledger(ledger_id, recovery=True, password=ml.config.password)
                if handle.last_add_confirmed >= 0:
                    last = await handle.read_entry(handle.last_add_confirmed)
                    state = CursorState.from_doc(msgpack.unpackb(last.payload, strict_map_key=False))
                await handle.close()
            except NoSuchLedgerError:
                log.warning("cursor %s of %s: its ledger %d is gone; using the snapshot", name, ml.name, ledger_id)
        cursor = cls(ml, name, state.mark_delete)
        cursor.deleted = ranges_to_positions(state.deleted)
        cursor.batch_deleted = {Position(*map(int, k.split(":"))): set(v) for k, v in state.batch_deleted.items()}
        cursor.properties = dict(state.properties)
        cursor.read_position = ml.position_after(cursor.mark_delete_position)
        cursor._old_ledger_id = ledger_id if ledger_id >= 0 else None
        cursor._node_version = stat.version
        return cursor

    def _state(self) -> CursorState:
        ranges = positions_to_ranges(self.deleted)[: self.ml.config.max_unacked_ranges_to_persist]
        return CursorState(self.mark_delete_position, ranges,
                           {f"{p.ledger_id}:{p.entry_id}": sorted(v) for p, v in self.batch_deleted.items()},
                           dict(self.properties))

    def _snapshot(self, ledger_id: int) -> bytes:
        return json.dumps({"cursor_ledger": ledger_id, "state": self._state().to_doc()}).encode()

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
        data = msgpack.packb(self._state().to_doc())
        if self._ledger is None or self._ledger_entries >= self.ml.config.cursor_max_entries_per_ledger:
            await self._switch_ledger(data)
            return
        await self._ledger.add_entry(data)
        self._ledger_entries += 1

    async def _switch_ledger(self, data: bytes) -> None:
        c = self.ml.config
        new = await self.ml.client.create_ledger(c.ensemble_size, c.write_quorum_size, c.ack_quorum_size,
                                                 password=c.password, custom={"managed-ledger-cursor": f"{self.ml.name}/{self.name}"})
        await new.add_entry(data)
        try:
            stat = await self.ml.store.set(self.ml.cursor_path(self.name), self._snapshot(new.ledger_id), self._node_version)
        except (BadVersionError, NoNodeError) as exc:
            self.ml.fence(exc)
            raise ManagedLedgerFencedError(f"cursor {self.name} of {self.ml.name} changed under us") from exc
        self._node_version = stat.version
        old, self._ledger, self._ledger_entries = self._ledger, new, 1
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

    # ---- acknowledgements ------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
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
        """Individual acks: each position is consumed; runs next to the mark-delete position collapse into it."""
        self._check()
        last = self.ml.last_confirmed_entry
        for p in positions:
            p = Position(*p)
            if self.mark_delete_position < p <= last:
                self.deleted.add(p)
                self.batch_deleted.pop(p, None)
        self._collapse()
        return self._persisted()

    def delete_batch_indexes(self, position, acked_indexes, batch_size: int) -> asyncio.Future:
        """Ack single messages of a batch entry; the entry is consumed once all ``batch_size`` are."""
        self._check()
        position = Position(*position)
        if self.is_deleted(position):
            return self._persisted()
        acked = self.batch_deleted.setdefault(position, set())
        acked.update(i for i in acked_indexes if 0 <= i < batch_size)
        if len(acked) >= batch_size:
            return self.delete([position])
        return self._persisted()

    def _persisted(self) -> asyncio.Future:
        fut = self._persist()
        fut.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self._after_ack())
        return fut

    def _set_mark_delete(self, position: Position) -> None:
        self.mark_delete_position = position
        self.deleted = {p for p in self.deleted if p > position}
        self.batch_deleted = {p: v for p, v in self.batch_deleted.items() if p > position}
        self._collapse()
        if self.read_position <= position:
            self.read_position = self.ml.position_after(position)

    def _collapse(self) -> None:
        while self.deleted:
            nxt = self.ml.position_after(self.mark_delete_position)
            if nxt not in self.deleted:
                break
            self.deleted.discard(nxt)
            self.mark_delete_position = nxt
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
        return position <= self.mark_delete_position or position in self.deleted

    def batch_deleted_indexes(self, position) -> frozenset[int] | None:
        acked = self.batch_deleted.get(Position(*position))
        return frozenset(acked) if acked else None

    @property
    def individually_deleted_ranges(self) -> list[tuple[int, int, int]]:
        return positions_to_ranges(self.deleted)

    # ---- reading -------------------------------------------------------------------

    def has_more_entries(self) -> bool:
        return self.ml.normalize(self.read_position) < self.ml.next_position

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position, skipping consumed ones; [] at the end."""
        self._check()
        while True:
            start = self.ml.normalize(max(self.read_position, self.ml.position_after(self.mark_delete_position)))
            window = list(self.ml.positions_from(start, max_entries + len(self.deleted)))
            if not window:
                self.read_position = start
                return []
            wanted = [p for p in window if not self.is_deleted(p)][:max_entries]
            if not wanted:
                self.read_position = self.ml.position_after(window[-1])
                continue
            began_at = self.read_position
            entries = await self.ml.read_entries_at(wanted)
            if self.read_position == began_at and entries:  # a seek during the read wins
                self.read_position = self.ml.position_after(entries[-1].position)
            return entries

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
        return max(0, between - sum(1 for p in self.deleted if p <= last))

    # ---- lifecycle ----------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None and not self._flusher.done():
            try:
                await self._flusher
            except (StorageError, asyncio.CancelledError):
                pass
        self._closed = True
        if not self.durable:
            self.ml.forget_non_durable(self)
        if self._ledger is not None:
            try:
                await self._ledger.close()
            except StorageError:
                pass

    async def delete_persisted(self) -> None:
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
