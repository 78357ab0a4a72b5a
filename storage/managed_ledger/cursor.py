"""ManagedCursor: a reader's position in a managed ledger and what it has acknowledged.

State: the mark-delete position (everything at or before it is consumed),
the individually deleted entries after it, acknowledged batch indexes of
partly consumed batches, and properties stored with the mark-delete (dedup
snapshots use them). The read position is where the next read starts; it is
not persisted (after a restart reading resumes after the mark-delete).

The individually deleted entries are an ``AckRanges`` (runs per ledger,
O(log n) membership) and batch-index acks a bitmask per entry, so neither a
read nor an ack does work in proportion to the number of holes.

Durability is cursor_ledger.py's: every change appends the whole state to
the cursor's own ledger, the metadata store holds a snapshot naming that
ledger, and changes made while a write is in flight are coalesced into the
next write; each caller's await returns once a write containing its change
is durable. Consumers' acks (``throttle=True``) are written no more often
than the mark-delete rate allows (mark_delete_rate.py): one that may not be
written now is answered at once and a timer writes the latest state when the
rate allows, or ``close`` does. ``persisted_mark_delete_position`` is what a
restart would come back to; trimming goes by it, never by an unwritten ack.
Restoring opens the cursor ledger with recovery (fencing any old
writer) and reads the last *complete* state from its tail, so the state
comes back exactly, however many holes it has.

Lifecycle: OPEN -> CLOSED -> DELETED (durable cursors), through the table in
lifecycle.py: ``close`` and ``delete_persisted`` here are the only changes.
The acknowledgement methods, ``seek``, ``rewind``, ``reset`` and reads change
the positions and ack state; the cursor ledger and snapshot change only in
CursorLedger. Ledgers are reached only through storage.client.api.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from storage.errors import (
    BadVersionError, CursorNotFoundError, ManagedLedgerClosedError, ManagedLedgerFencedError,
    NodeExistsError, NoNodeError, NoSuchLedgerError, StorageError,
)
from storage.client import api
from storage.managed_ledger.ack_ranges import AckRanges
from storage.managed_ledger.cursor_ledger import CursorLedger, read_latest_state
from storage.managed_ledger.cursor_state import CursorState, mask_indexes, snapshot_is_complete, state_from_doc
from storage.managed_ledger.lifecycle import ManagedCursorState, cursor_lifecycle
from storage.managed_ledger.mark_delete_rate import Bucket, admit
from storage.managed_ledger.metadata import ManagedLedgerInfo
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


def unconsumed_positions(info: ManagedLedgerInfo, deleted: AckRanges, start: Position, limit: int) -> list[Position]:
    """Up to ``limit`` existing positions from ``start`` on that are not in ``deleted``: jumps over acked runs."""
    wanted: list[Position] = []
    for ledger in info.ledgers:
        if ledger.ledger_id < start.ledger_id:
            continue
        first = start.entry_id if ledger.ledger_id == start.ledger_id else 0
        for lo, hi in deleted.unacked_runs(ledger.ledger_id, first, ledger.entries):
            take = min(hi - lo, limit - len(wanted))
            wanted.extend(Position(ledger.ledger_id, e) for e in range(lo, lo + take))
            if len(wanted) >= limit:
                return wanted
    return wanted


def _position(p) -> Position:
    """``p`` as a Position without building a new one when it is one already: an ACK's ids pass through here
    several times each (building the NamedTuples again was ~7 % of applying one, profiled)."""
    return p if type(p) is Position else Position(*p)


def _done() -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


class ManagedCursor:
    clock = staticmethod(time.monotonic)  # the mark-delete rate's clock

    def __init__(self, ml, name: str | None, mark_delete: Position, *, durable: bool = True):
        self.ml = ml
        self.name = name
        self.durable = durable
        self.mark_delete_position = Position(*mark_delete)
        self.persisted_mark_delete_position = self.mark_delete_position  # as of the last durable write
        self._rate_bucket: Bucket | None = None
        self._deferred: asyncio.TimerHandle | None = None  # the write the mark-delete rate put off
        self.deferred_acks = 0  # acks answered before their state was written (stats, tests)
        self.read_position = ml.position_after(self.mark_delete_position)
        self.deleted = AckRanges()
        self.batch_deleted: dict[Position, int] = {}  # bitmask of acked batch indexes, for partly acked entries
        self.properties: dict[str, int] = {}
        self._lifecycle = cursor_lifecycle(f"cursor {name} of {ml.name}")
        self._persistence = CursorLedger(self)
        self._seq = 0
        self._trimmed_at: int | None = None  # the first ack after loading always offers a trim

    # ---- create / restore --------------------------------------------------------

    @classmethod
    async def create(cls, ml, name: str, initial: InitialPosition) -> "ManagedCursor":
        mark = ml.last_confirmed_entry if initial is InitialPosition.LATEST else ml.position_before(ml.first_position)
        cursor = cls(ml, name, mark)
        initial = cursor._persistence.snapshot(-1)
        try:
            await ml.store.create(ml.cursor_path(name), initial, make_parents=True)
        except NodeExistsError:
            return await cls.restore(ml, name)
        cursor._persistence.node_version, cursor._persistence.node_bytes = 0, initial
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
                handle = await ml.open_ledger(ledger_id, recovery=True, cursor=name)
                try:
                    latest = await read_latest_state(handle)
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
        cursor._persistence.old_ledger_id = ledger_id if ledger_id >= 0 else None
        cursor._persistence.node_version, cursor._persistence.node_bytes = stat.version, data
        return cursor

    def _state(self) -> CursorState:
        return CursorState(self.mark_delete_position, self.deleted, self.batch_deleted, dict(self.properties), self._seq)

    def _next_state(self) -> CursorState:
        """The state to write next, numbered after the last one written."""
        self._seq += 1
        return self._state()

    # ---- persistence (cursor_ledger.py) -----------------------------------------------

    def _persist(self) -> asyncio.Future:
        """Schedule a durable write of the current state; the future resolves once it (or a later one) is stored."""
        if not self.durable:
            return _done()
        if self._deferred is not None:  # this write carries the put-off state too
            self._deferred.cancel()
            self._deferred = None
        return self._persistence.persist()

    def _admitted(self) -> bool:
        """Whether the mark-delete rate lets a write start now; if not, a write is put off until it does."""
        self._rate_bucket, wait = admit(self._rate_bucket, self.clock(), self.ml.config.mark_delete_rate_per_s)
        if wait <= 0:
            return True
        if self._deferred is None:
            self._deferred = asyncio.get_running_loop().call_later(wait, self._write_deferred)
        return False

    def _write_deferred(self) -> None:
        self._deferred = None
        if self.state is not ManagedCursorState.OPEN or not self._admitted():
            return
        self._persist().add_done_callback(self._deferred_written)

    def _deferred_written(self, fut: asyncio.Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self._after_ack()
            return
        log.warning("cursor %s of %s: writing acknowledgements failed: %s", self.name, self.ml.name, exc)
        try:
            self._check()
        except StorageError:
            return  # closed or fenced: close() wrote what it could, or the new owner restores the last state
        if self._deferred is None:  # try again when the rate next allows
            rate = self.ml.config.mark_delete_rate_per_s
            self._deferred = asyncio.get_running_loop().call_later(1.0 / rate if rate > 0 else 1.0,
                                                                   self._write_deferred)

    @property
    def mark_delete_writes(self) -> int:
        """States written since this cursor was loaded."""
        return self._persistence.writes

    @property
    def _ledger(self) -> api.WriteHandle | None:
        """The cursor ledger being written."""
        return self._persistence.ledger

    # ---- acknowledgements ------------------------------------------------------------

    @property
    def state(self) -> ManagedCursorState:
        return self._lifecycle.state

    def _check(self) -> None:
        if self.state is not ManagedCursorState.OPEN:
            raise ManagedLedgerClosedError(f"cursor {self.name} of {self.ml.name} is closed")
        self.ml.check_open()

    # The acknowledgement methods change the in-memory state *when called* and return an awaitable that
    # resolves once that state is durable (or at once, for a throttled ack the rate put off): a redelivery
    # decided right after an ack already sees it.

    def mark_delete(self, position, properties: dict[str, int] | None = None, *, throttle: bool = False) -> asyncio.Future:
        """Everything up to ``position`` is consumed (cumulative ack); ``properties`` are stored with it.
        ``throttle``: a consumer's ack, written under the mark-delete rate (see the module's docstring)."""
        self._check()
        position = min(Position(*position), self.ml.last_confirmed_entry)
        if properties is not None:
            self.properties = {k: int(v) for k, v in properties.items()}
        if position > self.mark_delete_position:
            self._set_mark_delete(position)
        return self._persisted(throttle)

    def delete(self, positions, *, throttle: bool = False) -> asyncio.Future:
        """Individual acks: each position is consumed; runs next to the mark-delete position collapse into it.

        Positions come from clients: one that does not exist is ignored (it would count as acked forever).
        ``throttle`` as for ``mark_delete``.
        """
        self._check()
        self._delete_now(positions)
        return self._persisted(throttle)

    def delete_many(self, positions, batch_masks=(), *, throttle: bool = False) -> asyncio.Future:
        """One ACK's individual acks at once: whole entries, and batch indexes as ``(position, acked mask,
        batch size)`` (as ``delete_batch_mask``). The state changes now; one future covers them all, so a
        1,000-id ACK schedules one durable write and one callback, not 1,000. ``throttle`` as for ``mark_delete``."""
        self.apply_deletes(positions, batch_masks)
        return self.persist_acks(throttle=throttle)

    def apply_deletes(self, positions, batch_masks=()) -> None:
        """``delete_many``'s change of the in-memory state alone: a caller applying one ACK in several parts
        (broker.server.acks) calls this per part and ``persist_acks`` once, so the ACK is still one write."""
        self._check()
        whole = list(positions)
        for position, acked_mask, batch_size in batch_masks:
            position = _position(position)
            if self._add_batch_mask(position, acked_mask, batch_size):
                whole.append(position)
        if whole:
            self._delete_now(whole)

    def persist_acks(self, *, throttle: bool = False) -> asyncio.Future:
        """A durable write of everything applied so far; ``throttle`` as for ``mark_delete``."""
        self._check()
        return self._persisted(throttle)

    def _delete_now(self, positions) -> None:
        last = self.ml.last_confirmed_entry
        sizes: dict[int, int] = {}  # entries per ledger, looked up once per call
        for p in positions:
            p = _position(p)
            if p.ledger_id not in sizes:
                sizes[p.ledger_id] = self.ml.ledger_entries(p.ledger_id)
            if self.mark_delete_position < p <= last and 0 <= p.entry_id < sizes[p.ledger_id]:
                self.deleted.add(p.ledger_id, p.entry_id)
                if self.batch_deleted:
                    self.batch_deleted.pop(p, None)
        self._collapse()

    def _exists(self, position: Position) -> bool:
        return 0 <= position.entry_id < self.ml.ledger_entries(position.ledger_id)

    def exists(self, position) -> bool:
        """Whether ``position`` names an entry of this log (one a client may acknowledge)."""
        position = _position(position)
        return position <= self.ml.last_confirmed_entry and self._exists(position)

    def delete_batch_indexes(self, position, acked_indexes, batch_size: int, *, throttle: bool = False) -> asyncio.Future:
        """Ack single messages of a batch entry; the entry is consumed once all ``batch_size`` are."""
        limit = min(batch_size, MAX_BATCH_INDEXES)
        bits = bytearray((max(limit, 0) + 7) // 8)  # one bitmap built in place: setting bits on an int copies it
        for i in acked_indexes:
            if 0 <= i < limit:
                bits[i >> 3] |= 1 << (i & 7)
        return self.delete_batch_mask(position, int.from_bytes(bits, "little"), batch_size, throttle=throttle)

    def delete_batch_mask(self, position, acked_mask: int, batch_size: int, *, throttle: bool = False) -> asyncio.Future:
        """The same with the acked indexes as the bits of one int (bit i = batch index i)."""
        self._check()
        position = Position(*position)
        if self._add_batch_mask(position, acked_mask, batch_size):
            return self.delete([position], throttle=throttle)
        return self._persisted(throttle)

    def _add_batch_mask(self, position: Position, acked_mask: int, batch_size: int) -> bool:
        """Record acked batch indexes of an existing, unacknowledged entry; True when that completes the entry
        (the caller deletes it whole)."""
        if self.is_deleted(position) or not position <= self.ml.last_confirmed_entry or not self._exists(position):
            return False
        limit = min(batch_size, MAX_BATCH_INDEXES)
        if acked_mask.bit_length() > limit:
            acked_mask &= (1 << limit) - 1
        acked = self.batch_deleted.get(position, 0) | acked_mask
        if acked.bit_count() >= batch_size:
            return True
        if acked:
            self.batch_deleted[position] = acked
        return False

    def _persisted(self, throttle: bool = False) -> asyncio.Future:
        if throttle and self.durable and not self._admitted():
            self.deferred_acks += 1
            return _done()
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
        first_unconsumed = self.ml.position_after(self.persisted_mark_delete_position).ledger_id
        if self.durable and first_unconsumed != self._trimmed_at:
            self._trimmed_at = first_unconsumed
            self.ml.factory.spawn(self.ml.trim())

    def is_deleted(self, position) -> bool:
        position = _position(position)
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
        wanted = unconsumed_positions(self.ml.info, self.deleted, start, max_entries)
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

    async def wait_for_entries(self) -> None:
        """Return once an entry exists at or after the read position; reads nothing, so cancelling is harmless."""
        await self.ml.wait_for_entries(self.read_position)
        self._check()

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
        if self._deferred is not None:  # acks the rate put off are written before the cursor closes
            try:
                await self._persist()
            except StorageError as exc:
                log.warning("cursor %s of %s: acknowledgements not written on close: %s", self.name, self.ml.name, exc)
        await self._persistence.wait_flushed()
        if self.state is ManagedCursorState.OPEN:  # a concurrent close may have got here first
            self._lifecycle.to(ManagedCursorState.CLOSED)
        if not self.durable:
            self.ml.forget_non_durable(self)
        await self._persistence.close()

    async def delete_persisted(self) -> None:
        if self.state is ManagedCursorState.DELETED:
            return
        await self.close()
        if not self.durable:
            return
        ids = self._persistence.ledger_ids()
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
