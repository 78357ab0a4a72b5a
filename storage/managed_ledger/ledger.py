"""ManagedLedger: one append-only log made of a chain of ledgers.

How it works:

- **Open** reads the ledger list (creating it if absent), opens the last
  ledger *with recovery* -- which fences it, so a previous owner's next add
  fails -- records its final size, finishes any deletions a crash left
  half-done, then creates a new ledger and appends it to the list by a
  conditional write. A version conflict on any later write of the list means
  another owner has taken over: the managed ledger is then **fenced** and
  every operation raises ManagedLedgerFencedError.
- **Adds and rollover** are the add pipeline's (add_pipeline.py).
- **Trimming** removes whole ledgers that every durable cursor has consumed
  and retention no longer keeps (the decision: trimming.py): one conditional
  write moves them to ``pending_deletion``, then they are deleted from the
  ledger store, then a second write forgets them. A crash in between is
  finished on the next open.
- **Reads** come from the entry cache when possible (recent adds), else
  from the bookies through a read handle per ledger.
- **Positions** (the first entry, the one after another, ...) are answered by
  the ledger list, ManagedLedgerInfo (metadata.py); the methods here pass on.

What may change its state: the lifecycle (OPENING / OPEN / FENCED / CLOSED /
DELETED) moves only through the table in lifecycle.py, from ``open``,
``fence``, ``close`` and ``delete`` here. The ledger list changes on open,
in the add pipeline (new ledger, entries added) and in ``trim``. It talks to
the ledger store only through storage.client.api.
"""

from __future__ import annotations

import asyncio
import logging
import time

from storage.client import api
from storage.admission import AddAdmission
from storage.errors import (
    BadVersionError, ManagedLedgerClosedError, ManagedLedgerFencedError, MetadataError, NodeExistsError, NoNodeError,
    NoSuchLedgerError,
)
from storage.managed_ledger.conditional_write import set_conditionally
from storage.managed_ledger.add_pipeline import AddPipeline
from storage.managed_ledger.cache import EntryCache
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.lifecycle import ManagedLedgerState, managed_ledger_lifecycle
from storage.managed_ledger.metadata import ManagedLedgerInfo, cursor_path, ledger_path, unquote_cursor
from storage.managed_ledger.passwords import open_with_password
from storage.managed_ledger.position import Entry, InitialPosition, Position
from storage.managed_ledger.stats import ManagedLedgerMeters
from storage.managed_ledger.trimming import Retention, ledgers_to_trim

log = logging.getLogger(__name__)

_OPEN, _FENCED, _CLOSED, _DELETED = (ManagedLedgerState.OPEN, ManagedLedgerState.FENCED, ManagedLedgerState.CLOSED,
                                     ManagedLedgerState.DELETED)


class ManagedLedger:
    def __init__(self, factory, name: str, config: ManagedLedgerConfig):
        self.factory = factory
        self.store = factory.store
        self.client: api.LedgerClient = factory.client
        self.clock = factory.clock
        self.name = name
        self.config = config
        self.password = factory.passwords.data_ledger(name)  # of the data ledgers it creates
        self.path = ledger_path(name)
        self.info = ManagedLedgerInfo()
        self._version = -1
        self._info_bytes: bytes | None = None  # what the node held at _version
        self._adds = AddPipeline(self)
        self._admission = AddAdmission(config.max_pending_add_entries, config.max_pending_add_bytes)
        self._read_handles: dict[int, api.ReadHandle] = {}
        self._waiters: list[asyncio.Future] = []
        self._meta_lock = asyncio.Lock()
        self._lifecycle = managed_ledger_lifecycle(name)
        self.cursors: dict = {}
        self._non_durable: set = set()
        self.cache = EntryCache(int(config.cache_size_mb * 1024 * 1024))
        self.stats = {"entries_added": 0, "bytes_added": 0, "entries_read": 0, "cache_hits": 0, "cache_misses": 0}
        self.meters = ManagedLedgerMeters()  # add latency, entry sizes, cache bytes (the broker's /metrics)
        self.last_confirmed_entry = Position(-1, -1)
        # called with the error when this managed ledger fences itself, whatever operation met the conflict
        # (a cursor's background write included), so its owner can give the topic up instead of retrying
        self.fence_listeners: list = []

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
        self.info, self._version, self._info_bytes = ManagedLedgerInfo.from_bytes(data), stat.version, data
        if self.info.ledgers:
            await self._recover_last_ledger()
        await self._adds.create_ledger()
        await self._finish_pending_deletions()
        self._lifecycle.to(_OPEN)
        self.last_confirmed_entry = self.info.last_confirmed()
        await self._load_cursors()
        return self

    async def open_ledger(self, ledger_id: int, *, recovery: bool, cursor: str | None = None) -> api.ReadHandle:
        """Open one of this managed ledger's data ledgers (or ``cursor``'s ledger), also under earlier
        secrets' passwords and the legacy empty one (passwords.py)."""
        passwords = self.factory.passwords
        accepted = passwords.accepted_data(self.name) if cursor is None else passwords.accepted_cursor(self.name, cursor)
        return await open_with_password(self.client, ledger_id, recovery=recovery, passwords=accepted)

    @property
    def state(self) -> ManagedLedgerState:
        return self._lifecycle.state

    async def _recover_last_ledger(self) -> None:
        last = self.info.ledgers[-1]
        try:
            handle = await self.open_ledger(last.ledger_id, recovery=True)
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
            data = self.info.to_bytes()
            try:
                stat = await set_conditionally(self.store, self.path, data, self._version, self._info_bytes)
            except (BadVersionError, NoNodeError) as exc:
                self.fence(exc)
                raise ManagedLedgerFencedError(f"{self.name}: the ledger list changed under us ({exc}); another owner took over") from exc
            self._version, self._info_bytes = stat.version, data

    def fence(self, exc: BaseException) -> None:
        """Another owner took over: fail every add in flight or queued, and every later operation."""
        if self.state is _FENCED:
            return
        log.warning("managed ledger %s fenced: %s", self.name, exc)
        if self._lifecycle.can(_FENCED):
            self._lifecycle.to(_FENCED)
        self._adds.fail_all(ManagedLedgerFencedError(f"{self.name} is fenced: {exc}"))
        self._wake_waiters()
        for listener in list(self.fence_listeners):
            try:
                listener(exc)
            except Exception:  # a listener's bug must not keep the others from hearing of the fence
                log.exception("fence listener of %s failed", self.name)

    def _check_not_fenced(self) -> None:
        if self.state is _FENCED:
            raise ManagedLedgerFencedError(f"{self.name} is fenced: another owner took it over")

    def check_open(self) -> None:
        self._check_not_fenced()
        if self.state is _CLOSED or self.state is _DELETED:
            raise ManagedLedgerClosedError(f"{self.name} is {self.state.value}")

    # ---- adds ------------------------------------------------------------------

    @property
    def adds_waiting(self) -> int:
        """Adds waiting for room under max_pending_add_entries / max_pending_add_bytes (not yet in the log)."""
        return self._admission.waiting

    @property
    def current_ledger_id(self) -> int:
        return self.info.ledgers[-1].ledger_id if self.info.ledgers else -1

    async def add_entry(self, data: bytes) -> Position:
        """Append one entry; returns its position once Qa bookies have it. Adds complete in call order.

        Over ``max_pending_add_entries`` / ``max_pending_add_bytes`` it first
        waits, in turn (a later add never overtakes a waiting one).
        Raises ManagedLedgerFencedError (another owner), ManagedLedgerClosedError,
        or the ledger store's error when no ledger could take the entry.
        """
        self.check_open()
        n = len(data)
        # Pulsar's add latency starts when the add is asked for: a wait for room under the pending limits counts.
        started = time.perf_counter()
        try:
            if not self._admission.try_admit(n):
                await self._admission.admit(n)
                try:
                    self.check_open()  # fenced or closed while it waited
                except BaseException:
                    self._admission.release(n)
                    raise
            fut = self._adds.add(data)
            fut.add_done_callback(lambda _f: self._admission.release(n))
            position = await fut
        except Exception:
            self.meters.add_errors += 1
            raise
        self.meters.added((time.perf_counter() - started) * 1000.0, n)
        return position

    def _record_add(self, position: Position, data: bytes) -> None:
        """An add was acknowledged (called by the add pipeline, in order)."""
        self.last_confirmed_entry = position
        self.cache.insert(position, data)
        self.stats["entries_added"] += 1
        self.stats["bytes_added"] += len(data)

    def _after_rollover(self) -> None:
        if self.cursors:  # they may have consumed all of the ledger just closed (with none, the timer trims)
            self.factory.spawn(self.trim())

    # ---- positions: the ledger list answers (ManagedLedgerInfo) --------------------

    def ledger_entries(self, ledger_id: int) -> int:
        return self.info.ledger_entries(ledger_id)

    def normalize(self, position: Position) -> Position:
        """The first existing entry at or after ``position``, else the position the next add will take."""
        return self.info.normalize(position)

    @property
    def next_position(self) -> Position:
        """Where the next entry will be (the end of the log)."""
        return self.info.next_position

    @property
    def first_position(self) -> Position:
        return self.info.first_position

    def position_after(self, position: Position) -> Position:
        return self.info.position_after(position)

    def position_before(self, position: Position) -> Position:
        """The entry just before ``position`` (``(L, -1)`` of the first ledger when there is none)."""
        return self.info.position_before(position)

    def entries_between(self, after: Position, upto: Position) -> int:
        """How many entries lie in (after, upto]."""
        return self.info.entries_between(after, upto)

    def position_at_index(self, index: int) -> Position | None:
        """The ``index``-th existing entry (0 = the first), or None past the end."""
        return self.info.position_at_index(index)

    @property
    def number_of_entries(self) -> int:
        return self.info.number_of_entries

    @property
    def total_size(self) -> int:
        return self.info.total_size

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

    async def _read_run(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        cached = [self.cache.get(Position(ledger_id, e)) for e in range(first, last + 1)]
        if all(d is not None for d in cached):
            self.stats["cache_hits"] += len(cached)
            self.stats["entries_read"] += len(cached)
            self.meters.cache_hit_bytes += sum(map(len, cached))
            return [Entry(Position(ledger_id, first + k), d) for k, d in enumerate(cached)]
        self.stats["cache_misses"] += last - first + 1
        handle = await self._read_handle(ledger_id)
        entries = await handle.read_entries(first, last)
        self.stats["entries_read"] += len(entries)
        self.meters.cache_miss_bytes += sum(len(e.payload) for e in entries)
        return [Entry(Position(ledger_id, e.entry_id), e.payload) for e in entries]

    async def _read_handle(self, ledger_id: int) -> api.ReadHandle:
        current = self._adds.current
        if current is not None and current.ledger_id == ledger_id:
            return current
        if ledger_id == self.current_ledger_id and self._adds.rolling is not None:
            await asyncio.shield(self._adds.rolling)
            return await self._read_handle(ledger_id)
        handle = self._read_handles.get(ledger_id)
        if handle is None:
            handle = await self.open_ledger(ledger_id, recovery=False)
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
        """The lowest mark-delete position, written or in memory: an ack a restart would forget holds its ledger
        back, and so does a reset to before the written position that is not written yet."""
        positions = [min(c.persisted_mark_delete_position, c.mark_delete_position) for c in self.cursors.values()]
        return min(positions) if positions else None

    async def trim(self) -> None:
        """Delete consumed ledgers beyond retention (never the current one); also rolls an over-age ledger."""
        if self.state is not _OPEN:
            return
        self._adds.roll_if_due()
        doomed = ledgers_to_trim(self.info, self.slowest_mark_delete(), self.clock(), Retention.of(self.config))
        await self._remove_ledgers([i.ledger_id for i in doomed])

    async def remove_ledgers_before(self, position: Position) -> list[int]:
        """Explicit truncation (a log stream's): remove every ledger whose entries all lie before ``position``,
        never the one being written, by the same two-phase deletion as ``trim``. Returns their ids."""
        self.check_open()
        ids = [i.ledger_id for i in self.info.ledgers[:-1]
               if Position(i.ledger_id, i.entries - 1) < Position(*position)]
        await self._remove_ledgers(ids)
        return ids

    async def _remove_ledgers(self, ids: list[int]) -> None:
        if not ids:
            return
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
        if self.state is _CLOSED or self.state is _DELETED:
            return
        fenced = self.state is _FENCED
        self._lifecycle.to(_CLOSED)
        self._wake_waiters()
        for cursor in list(self.cursors.values()) + list(self._non_durable):
            await cursor.close()
        self._adds.cancel_rollover()
        for handle in list(self._read_handles.values()):
            await handle.close()
        self._read_handles.clear()
        await self._adds.close_current(fenced)
        self.cache.clear()
        self.factory.forget(self)

    async def delete(self) -> None:
        """Delete every ledger, cursor ledger and the metadata of this managed ledger."""
        if self.state is _DELETED:
            return
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
        self._lifecycle.to(_DELETED)

    def cursor_path(self, cursor_name: str) -> str:
        return cursor_path(self.name, cursor_name)

    def forget_non_durable(self, cursor) -> None:
        self._non_durable.discard(cursor)
