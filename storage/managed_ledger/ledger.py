"""ManagedLedger: one append-only log made of a chain of ledgers.

How it works:

- **Open** reads the ledger list (creating it if absent), opens the last
  ledger *with recovery* -- which fences it, so a previous owner's next add
  fails -- records its final size, finishes any deletions a crash left
  half-done, then creates a new ledger and appends it to the list by a
  conditional write. A version conflict on any later write of the list means
  another owner has taken over: the managed ledger is then **fenced** and
  every operation raises ManagedLedgerFencedError.
- **Adds** go straight to the current ledger's pipelined writer, so they
  complete in the order they were made. When the current ledger is full
  (entries, bytes or age, Pulsar's rules) or a write fails, new adds queue,
  the ledger is closed, a new one is created and the queued adds -- first
  the failed ones, in their order -- go to it.
- **Trimming** removes whole ledgers that every durable cursor has consumed
  and retention no longer keeps: one conditional write moves them to
  ``pending_deletion``, then they are deleted from the ledger store, then a
  second write forgets them. A crash in between is finished on the next open.
- **Reads** come from the entry cache when possible (recent adds), else
  from the bookies through a read handle per ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from storage.errors import (
    BadVersionError, LedgerFencedError, ManagedLedgerClosedError, ManagedLedgerFencedError, MetadataError,
    NodeExistsError, NoNodeError, NoSuchLedgerError, StorageError,
)
from storage.managed_ledger.cache import EntryCache
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.metadata import LedgerInfo, ManagedLedgerInfo, cursor_path, ledger_path, unquote_cursor
from storage.managed_ledger.position import Entry, InitialPosition, Position

log = logging.getLogger(__name__)

MAX_ADD_ATTEMPTS = 3


class _OpAdd:
    __slots__ = ("data", "future", "attempts")

    def __init__(self, data: bytes, future: asyncio.Future):
        self.data = data
        self.future = future
        self.attempts = 0


class ManagedLedger:
    def __init__(self, factory, name: str, config: ManagedLedgerConfig):
        self.factory = factory
        self.store = factory.store
        self.client = factory.client
        self.clock = factory.clock
        self.name = name
        self.config = config
        self.path = ledger_path(name)
        self.info = ManagedLedgerInfo()
        self._version = -1
        self._current = None  # LedgerHandle being written
        self._queued: deque[_OpAdd] = deque()  # waiting for a writable ledger
        self._inflight: deque[_OpAdd] = deque()  # pushed to the current ledger, in order
        self._retry: list[_OpAdd] = []
        self._drained: asyncio.Future | None = None
        self._rolling: asyncio.Task | None = None
        self._read_handles: dict[int, object] = {}
        self._waiters: list[asyncio.Future] = []
        self._meta_lock = asyncio.Lock()
        self._state = "opening"
        self.cursors: dict = {}
        self._non_durable: set = set()
        self.cache = EntryCache(int(config.cache_size_mb * 1024 * 1024))
        self.stats = {"entries_added": 0, "bytes_added": 0, "entries_read": 0, "cache_hits": 0, "cache_misses": 0}
        self.last_confirmed_entry = Position(-1, -1)

    # ---- open ------------------------------------------------------------------

    async def open(self) -> "ManagedLedger":
        try:
            data, stat = await self.store.get(self.path)
        except NoNodeError:
            try:
                await self.store.create(self.path, ManagedLedgerInfo().to_bytes(), make_parents=True)
            except NodeExistsError:
                pass
            data, stat = await self.store.get(self.path)
        self.info, self._version = ManagedLedgerInfo.from_bytes(data), stat.version
        if self.info.ledgers:
            await self._recover_last_ledger()
        await self._create_ledger()
        await self._finish_pending_deletions()
        self._state = "open"
        self._refresh_last_confirmed()
        await self._load_cursors()
        return self

    async def _recover_last_ledger(self) -> None:
        last = self.info.ledgers[-1]
        try:
            handle = await self.client.open_ledger(last.ledger_id, recovery=True, password=self.config.password)
        except NoSuchLedgerError:
            handle = None
        if handle is not None:
            last.entries = handle.last_add_confirmed + 1
            last.size = handle.length
            await handle.close()
        if handle is None or last.entries == 0:
            self.info.ledgers.pop()
            if handle is not None:
                self.info.pending_deletion.append(last.ledger_id)

    async def _load_cursors(self) -> None:
        from storage.managed_ledger.cursor import ManagedCursor

        try:
            nodes = await self.store.children(self.path)
        except NoNodeError:
            nodes = []
        for node in sorted(nodes):
            cursor = await ManagedCursor.restore(self, unquote_cursor(node))
            self.cursors[cursor.name] = cursor

    # ---- metadata --------------------------------------------------------------

    async def write_info(self) -> None:
        """Conditional write of the ledger list; a conflict fences this managed ledger."""
        async with self._meta_lock:
            self._check_not_fenced()
            try:
                stat = await self.store.set(self.path, self.info.to_bytes(), self._version)
            except (BadVersionError, NoNodeError) as exc:
                self.fence(exc)
                raise ManagedLedgerFencedError(f"{self.name}: the ledger list changed under us ({exc}); another owner took over") from exc
            self._version = stat.version

    def fence(self, exc: BaseException) -> None:
        if self._state == "fenced":
            return
        log.warning("managed ledger %s fenced: %s", self.name, exc)
        self._state = "fenced"
        err = ManagedLedgerFencedError(f"{self.name} is fenced: {exc}")
        for op in [*self._inflight, *self._queued, *self._retry]:
            if not op.future.done():
                op.future.set_exception(err)
        self._inflight.clear()
        self._queued.clear()
        self._retry.clear()
        self._wake_waiters()

    def _check_not_fenced(self) -> None:
        if self._state == "fenced":
            raise ManagedLedgerFencedError(f"{self.name} is fenced: another owner took it over")

    def check_open(self) -> None:
        self._check_not_fenced()
        if self._state == "closed":
            raise ManagedLedgerClosedError(f"{self.name} is closed")

    # ---- ledgers ---------------------------------------------------------------

    async def _create_ledger(self) -> None:
        c = self.config
        handle = await self.client.create_ledger(
            c.ensemble_size, c.write_quorum_size, c.ack_quorum_size, password=c.password,
            custom={"managed-ledger": self.name})
        self.info.ledgers.append(LedgerInfo(handle.ledger_id, 0, 0, self.clock()))
        try:
            await self.write_info()
        except BaseException:
            self.info.ledgers.pop()
            try:
                await handle.close()
                await self.client.delete_ledger(handle.ledger_id)
            except StorageError:
                pass
            raise
        self._current = handle

    @property
    def current_ledger_id(self) -> int:
        return self.info.ledgers[-1].ledger_id if self.info.ledgers else -1

    def _should_roll(self) -> bool:
        info = self.info.ledgers[-1]
        age = self.clock() - info.timestamp
        full = info.entries >= self.config.max_entries_per_ledger or info.size >= self.config.max_size_per_ledger_bytes
        return info.entries > 0 and ((full and age >= self.config.min_ledger_rollover_time_s)
                                     or age >= self.config.max_ledger_rollover_time_s)

    def _start_rollover(self) -> None:
        if self._rolling is None and self._state == "open":
            self._rolling = asyncio.get_running_loop().create_task(self._rollover())

    async def _rollover(self) -> None:
        old, self._current = self._current, None  # new adds queue from here on
        try:
            if self._inflight:
                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
            if old is not None:
                await self._close_written_ledger(old)
            self._queued.extendleft(reversed(self._retry))
            self._retry.clear()
            await self._create_ledger()
            while self._queued and self._current is not None and not self._full_when_pushed():
                self._push(self._queued.popleft())
            if self.cursors:  # they may have consumed all of the ledger just closed (with none, the timer trims)
                self.factory.spawn(self.trim())
        except ManagedLedgerFencedError as exc:
            self.fence(exc)
        except StorageError as exc:
            log.warning("managed ledger %s could not start a new ledger: %s", self.name, exc)
            while self._queued:
                op = self._queued.popleft()
                if not op.future.done():
                    op.future.set_exception(exc)
        finally:
            self._rolling = None
        if self._queued and self._state == "open":
            self._start_rollover()  # the new ledger filled up (or could not be made): the rest go to the next

    async def _close_written_ledger(self, handle) -> None:
        info = self.info.ledgers[-1]
        try:
            await handle.close()
        except LedgerFencedError as exc:
            self.fence(exc)
            raise ManagedLedgerFencedError(f"{self.name}: ledger {handle.ledger_id} was fenced") from exc
        except StorageError as exc:
            log.warning("closing ledger %d of %s: %s", handle.ledger_id, self.name, exc)
        info.entries = handle.last_add_confirmed + 1
        if info.entries == 0:
            self.info.ledgers.pop()
            self.info.pending_deletion.append(handle.ledger_id)

    # ---- adds ------------------------------------------------------------------

    async def add_entry(self, data: bytes) -> Position:
        """Append one entry; returns its position once Qa bookies have it. Adds complete in call order.

        Raises ManagedLedgerFencedError (another owner), ManagedLedgerClosedError,
        or the ledger store's error when no ledger could take the entry.
        """
        self.check_open()
        op = _OpAdd(bytes(data), asyncio.get_running_loop().create_future())
        if self._current is not None and self._rolling is None and not self._queued and not self._full_when_pushed():
            self._push(op)
        else:
            self._queued.append(op)
            if self._rolling is None:
                self._start_rollover()
        return await op.future

    def _full_when_pushed(self) -> bool:
        """Counting adds in flight, would the current ledger be over its entry or size quota?"""
        info = self.info.ledgers[-1]
        if self.clock() - info.timestamp < self.config.min_ledger_rollover_time_s:
            return False
        pushed_bytes = info.size + sum(len(op.data) for op in self._inflight) if self._inflight else info.size
        return (info.entries + len(self._inflight) >= self.config.max_entries_per_ledger
                or pushed_bytes >= self.config.max_size_per_ledger_bytes)

    def _push(self, op: _OpAdd) -> None:
        handle = self._current
        op.attempts += 1
        self._inflight.append(op)
        handle.add_entry_async(op.data).add_done_callback(lambda f, op=op, h=handle: self._add_done(op, h, f))

    def _add_done(self, op: _OpAdd, handle, fut: asyncio.Future) -> None:
        if op in self._inflight:
            self._inflight.remove(op)
        if self._state == "fenced":
            return
        exc = ManagedLedgerClosedError(f"{self.name} closed") if fut.cancelled() else fut.exception()
        if exc is None:
            position = Position(handle.ledger_id, fut.result())
            info = self.info.ledgers[-1]
            info.entries += 1
            info.size += len(op.data)
            self.last_confirmed_entry = position
            self.cache.insert(position, op.data)
            self.stats["entries_added"] += 1
            self.stats["bytes_added"] += len(op.data)
            if not op.future.done():
                op.future.set_result(position)
            self._wake_waiters()
            if self._current is handle and self._should_roll():
                self._start_rollover()
        elif isinstance(exc, LedgerFencedError):
            self.fence(exc)
            if not op.future.done():
                op.future.set_exception(ManagedLedgerFencedError(f"{self.name}: ledger {handle.ledger_id} was fenced"))
        elif op.attempts >= MAX_ADD_ATTEMPTS:
            if not op.future.done():
                op.future.set_exception(exc)
        else:
            self._retry.append(op)  # failures arrive in order: the retry list keeps it
            if self._current is handle:
                self._start_rollover()
        if not self._inflight and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ---- positions ---------------------------------------------------------------

    def ledger_entries(self, ledger_id: int) -> int:
        for info in self.info.ledgers:
            if info.ledger_id == ledger_id:
                return info.entries
        return 0

    def _refresh_last_confirmed(self) -> None:
        for info in reversed(self.info.ledgers):
            if info.entries > 0:
                self.last_confirmed_entry = Position(info.ledger_id, info.entries - 1)
                return
        first = self.info.ledgers[0].ledger_id if self.info.ledgers else -1
        self.last_confirmed_entry = Position(first, -1)

    def normalize(self, position: Position) -> Position:
        """The first existing entry at or after ``position``, else the position the next add will take."""
        for info in self.info.ledgers:
            if info.ledger_id > position.ledger_id and info.entries > 0:
                return Position(info.ledger_id, 0)
            if info.ledger_id == position.ledger_id and max(position.entry_id, 0) < info.entries:
                return Position(info.ledger_id, max(position.entry_id, 0))
        return self.next_position

    @property
    def next_position(self) -> Position:
        """Where the next entry will be (the end of the log)."""
        last = self.info.ledgers[-1]
        return Position(last.ledger_id, last.entries)

    @property
    def first_position(self) -> Position:
        return self.normalize(Position(-1, 0))

    def position_after(self, position: Position) -> Position:
        return self.normalize(Position(position.ledger_id, position.entry_id + 1))

    def position_before(self, position: Position) -> Position:
        """The entry just before ``position`` (``(L, -1)`` of the first ledger when there is none)."""
        previous = None
        for info in self.info.ledgers:
            if info.ledger_id == position.ledger_id and position.entry_id > 0:
                return Position(info.ledger_id, min(position.entry_id, info.entries) - 1)
            if info.ledger_id >= position.ledger_id:
                break
            if info.entries > 0:
                previous = Position(info.ledger_id, info.entries - 1)
        return previous or Position(self.info.ledgers[0].ledger_id, -1)

    def entries_between(self, after: Position, upto: Position) -> int:
        """How many entries lie in (after, upto]."""
        count = 0
        for info in self.info.ledgers:
            lo = 0 if info.ledger_id > after.ledger_id else (after.entry_id + 1 if info.ledger_id == after.ledger_id else info.entries)
            hi = info.entries - 1 if info.ledger_id < upto.ledger_id else (upto.entry_id if info.ledger_id == upto.ledger_id else -1)
            if hi >= lo:
                count += hi - lo + 1
        return count

    def positions_from(self, start: Position, limit: int):
        """Yield up to ``limit`` existing positions from ``start`` on, in order."""
        position = self.normalize(start)
        for info in self.info.ledgers:
            if info.ledger_id < position.ledger_id:
                continue
            first = position.entry_id if info.ledger_id == position.ledger_id else 0
            for entry_id in range(first, info.entries):
                if limit <= 0:
                    return
                yield Position(info.ledger_id, entry_id)
                limit -= 1

    @property
    def number_of_entries(self) -> int:
        return sum(info.entries for info in self.info.ledgers)

    @property
    def total_size(self) -> int:
        return sum(info.size for info in self.info.ledgers)

    @property
    def properties(self) -> dict:
        return self.info.properties

    def ledgers_info(self) -> list[dict]:
        return [{"ledger_id": i.ledger_id, "entries": i.entries, "size": i.size, "timestamp": i.timestamp}
                for i in self.info.ledgers]

    # ---- reads -------------------------------------------------------------------

    async def read_entries_at(self, positions) -> list[Entry]:
        """Entries at the given positions, in position order; positions that no longer exist are skipped."""
        wanted = sorted(Position(*p) for p in positions)
        wanted = [p for p in wanted if 0 <= p.entry_id < self.ledger_entries(p.ledger_id)]
        out: list[Entry] = []
        i = 0
        while i < len(wanted):
            j = i
            while j + 1 < len(wanted) and wanted[j + 1].ledger_id == wanted[i].ledger_id \
                    and wanted[j + 1].entry_id == wanted[j].entry_id + 1:
                j += 1
            out.extend(await self._read_run(wanted[i].ledger_id, wanted[i].entry_id, wanted[j].entry_id))
            i = j + 1
        return out

    def position_at_index(self, index: int) -> Position | None:
        """The ``index``-th existing entry (0 = the first), or None past the end."""
        for info in self.info.ledgers:
            if index < info.entries:
                return Position(info.ledger_id, index)
            index -= info.entries
        return None

    async def _read_run(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        cached = [self.cache.get(Position(ledger_id, e)) for e in range(first, last + 1)]
        if all(d is not None for d in cached):
            self.stats["cache_hits"] += len(cached)
            self.stats["entries_read"] += len(cached)
            return [Entry(Position(ledger_id, first + k), d) for k, d in enumerate(cached)]
        self.stats["cache_misses"] += last - first + 1
        handle = await self._read_handle(ledger_id)
        entries = await handle.read_entries(first, last)
        self.stats["entries_read"] += len(entries)
        return [Entry(Position(ledger_id, e.entry_id), e.payload) for e in entries]

    async def _read_handle(self, ledger_id: int):
        current = self._current
        if current is not None and current.ledger_id == ledger_id:
            return current
        if ledger_id == self.current_ledger_id and self._rolling is not None:
            await asyncio.shield(self._rolling)
            return await self._read_handle(ledger_id)
        handle = self._read_handles.get(ledger_id)
        if handle is None:
            handle = await self.client.open_ledger(ledger_id, recovery=False, password=self.config.password)
            self._read_handles[ledger_id] = handle
        return handle

    async def wait_for_entries(self, position: Position) -> None:
        """Return once an entry exists at or after ``position`` (or the ledger is fenced/closed)."""
        while self.normalize(position) >= self.next_position:
            self.check_open()
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ---- cursors -----------------------------------------------------------------

    async def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST):
        """The durable cursor ``name``, created at ``initial_position`` if new (restored if it exists)."""
        from storage.managed_ledger.cursor import ManagedCursor

        self.check_open()
        cursor = self.cursors.get(name)
        if cursor is None:
            cursor = await ManagedCursor.create(self, name, initial_position)
            self.cursors[name] = cursor
        return cursor

    def new_non_durable_cursor(self, start: Position | None = None, inclusive: bool = False):
        """A cursor kept in memory only; starts after ``start`` (at it when ``inclusive``), or at the earliest entry."""
        from storage.managed_ledger.cursor import ManagedCursor

        self.check_open()
        if start is None:
            mark = self.position_before(self.first_position)
        else:
            start = Position(*start)
            mark = self.position_before(start) if inclusive else start
        cursor = ManagedCursor(self, None, mark, durable=False)
        self._non_durable.add(cursor)
        return cursor

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None:
            await cursor.delete_persisted()
        await self.trim()

    # ---- retention ---------------------------------------------------------------

    def slowest_mark_delete(self) -> Position | None:
        positions = [c.mark_delete_position for c in self.cursors.values()]
        return min(positions) if positions else None

    async def trim(self) -> None:
        """Delete consumed ledgers beyond retention (never the current one); also rolls an over-age ledger."""
        if self._state != "open":
            return
        if self._current is not None and self._should_roll():
            self._start_rollover()
        slowest = self.slowest_mark_delete()
        now = self.clock()
        total = self.total_size
        retention_s, retention_bytes = self.config.retention_time_s, self.config.retention_size_mb * 1024 * 1024
        doomed: list[LedgerInfo] = []
        for info in self.info.ledgers[:-1]:
            consumed = slowest is None or slowest >= Position(info.ledger_id, info.entries - 1)
            if not consumed:
                break
            expired = retention_s >= 0 and now - info.timestamp > retention_s
            over_size = retention_bytes >= 0 and total - info.size >= retention_bytes
            if not (expired or over_size):
                break
            doomed.append(info)
            total -= info.size
        if not doomed:
            return
        ids = [i.ledger_id for i in doomed]
        self.info.ledgers = [i for i in self.info.ledgers if i.ledger_id not in ids]
        self.info.pending_deletion.extend(ids)
        await self.write_info()
        for ledger_id in ids:
            handle = self._read_handles.pop(ledger_id, None)
            if handle is not None:
                await handle.close()
        self.cache.evict_before(self.first_position)
        await self._finish_pending_deletions()

    async def _finish_pending_deletions(self) -> None:
        if not self.info.pending_deletion:
            return
        for ledger_id in list(self.info.pending_deletion):
            await self.factory.hooks.before_delete_ledger(self, ledger_id)
            try:
                await self.client.delete_ledger(ledger_id)
            except (NoSuchLedgerError, NoNodeError):
                pass  # deleted before a crash: nothing left to do
        self.info.pending_deletion = []
        await self.write_info()

    # ---- lifecycle -----------------------------------------------------------------

    async def close(self) -> None:
        if self._state in ("closed",):
            return
        fenced = self._state == "fenced"
        self._state = "closed"
        self._wake_waiters()
        for cursor in list(self.cursors.values()) + list(self._non_durable):
            await cursor.close()
        if self._rolling is not None:
            self._rolling.cancel()
        for handle in list(self._read_handles.values()):
            await handle.close()
        self._read_handles.clear()
        if self._current is not None and not fenced:
            try:
                await self._current.close()
            except StorageError as exc:
                log.warning("closing the current ledger of %s: %s", self.name, exc)
        self._current = None
        self.cache.clear()
        self.factory.forget(self)

    async def delete(self) -> None:
        """Delete every ledger, cursor ledger and the metadata of this managed ledger."""
        cursors = list(self.cursors.values())
        ledger_ids = [i.ledger_id for i in self.info.ledgers] + list(self.info.pending_deletion)
        await self.close()
        for cursor in cursors:
            await cursor.delete_persisted()
        for ledger_id in ledger_ids:
            try:
                await self.client.delete_ledger(ledger_id)
            except (NoSuchLedgerError, NoNodeError):
                pass
        try:
            await self.store.delete_recursive(self.path)
        except MetadataError as exc:
            log.warning("deleting the metadata of %s: %s", self.name, exc)

    def cursor_path(self, cursor_name: str) -> str:
        return cursor_path(self.name, cursor_name)

    def forget_non_durable(self, cursor) -> None:
        self._non_durable.discard(cursor)
