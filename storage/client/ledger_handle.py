"""LedgerHandle: the single writer of a ledger.

How an add works
----------------
``add_entry_async(payload)`` assigns the next entry id, packages the entry
with the current LAC piggybacked (``storage.digest.package``), queues a
``PendingAdd`` and sends it to the Qw bookies of its write set (ensemble
positions ``e mod E .. e mod E + Qw - 1``) without awaiting anything: many
adds are in flight at once. Each bookie ack is recorded against its ensemble
position; ``AddQueue.ready()`` releases entries in order once each has Qa
acks, which advances the LAC and resolves the add's future with its entry id.

Failures
--------
* A fenced / closed answer means a recovery took the ledger over: the handle
  fails, every pending and later add fails with ``LedgerFencedError``.
  Unauthorized (wrong password) and no-such-ledger (deleted) are fatal too.
* Anything else from a bookie -- a timeout, a lost connection, read-only,
  an internal error -- starts an ensemble change for that bookie's position
  (``storage.client.ensemble_change``): acks keep being recorded but no add
  completes until the new fragment is in the metadata and the unacknowledged
  entries have been re-sent to the replacement. Entries are never lost or
  reordered: they keep their ids and are re-sent verbatim.

Adds in flight are bounded (``max_pending_adds_per_ledger`` and
``..._bytes_per_ledger``, storage.admission): over the bound
``add_entry`` waits its turn, up to ``wait_timeout_on_backpressure_s``, and
``add_entry_async`` -- which cannot wait -- fails at once; both with
``TooManyPendingAddsError``, as BookKeeper's client fails an add with
TooManyRequests once its wait on backpressure is over. Recovery re-adds are
not counted: recovery bounds its own reads ahead.

``close()`` waits for pending adds, then writes CLOSED with the final
``last_entry_id`` (the LAC) and length by a conditional write. The recovery
path reuses this class with ``recovery=True``: adds carry FLAG_RECOVERY
(accepted on fenced ledgers), bodies are re-added verbatim, and the metadata
state it may write under is IN_RECOVERY instead of OPEN.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from storage import digest
from storage.admission import AddAdmission
from storage.client.context import ClientContext
from storage.client.config import PlacementPolicy
from storage.client.ensemble_change import EnsembleChange
from storage.client.pending_add import AddQueue, PendingAdd
from storage.client.read_handle import ReadHandle
from storage.errors import (
    BookieUnavailableError,
    ClientClosedError,
    FrameTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerMetadataError,
    MalformedRequestError,
    MetadataError,
    NoNodeError,
    NoSuchLedgerError,
    BadVersionError,
    StorageError,
    TooManyPendingAddsError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key
from storage.metadata import paths

log = logging.getLogger(__name__)

# Errors that no other bookie would answer differently: replacing the bookie cannot help.
_FATAL = (UnauthorizedError, NoSuchLedgerError, FrameTooLargeError, MalformedRequestError)
# Errors that stop a writer without writing metadata on close: the ledger is someone else's now (or gone).
_LOST = (LedgerFencedError, NoSuchLedgerError, UnauthorizedError, ClientClosedError)

_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"


def _copy(exc: StorageError) -> StorageError:
    return type(exc)(*exc.args)


class LedgerHandle(ReadHandle):
    """Writes (and reads) a ledger. Obtain one from ``LedgerClient.create_ledger``."""

    def __init__(
        self,
        ctx: ClientContext,
        metadata: LedgerMetadata,
        version: int,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
        placement: PlacementPolicy | None = None,
    ):
        super().__init__(ctx, metadata, version, last_add_confirmed=last_add_confirmed)
        self._placement = placement or ctx.config.placement  # the zone rule of this ledger's ensemble changes
        self._loop = asyncio.get_running_loop()
        self._recovery = recovery
        self._key = master_key(metadata.password)
        self._queue = AddQueue(metadata.ack_quorum_size)
        self._last_add_pushed = last_add_confirmed
        self._pushed_length = length
        self._confirmed_length = length
        self._ensemble = list(metadata.current_ensemble)
        e, qw = metadata.ensemble_size, metadata.write_quorum_size
        self._positions = [tuple((s + k) % e for k in range(qw)) for s in range(e)]
        self._failure: StorageError | None = None
        self._state = _OPEN
        self._to_replace: dict[int, str] = {}  # position -> failed bookie awaiting a replacement
        self._failed_bookies: set[str] = set()  # never chosen again by this handle
        self._change_task: asyncio.Task | None = None
        self._idle_waiters: list[asyncio.Future] = []
        self._close_task: asyncio.Task | None = None
        cfg = ctx.config
        self._admission = AddAdmission(cfg.max_pending_adds_per_ledger, cfg.max_pending_add_bytes_per_ledger)

    # ---- properties --------------------------------------------------------

    @property
    def last_add_pushed(self) -> int:
        """Highest entry id handed out (acknowledged or not)."""
        return self._last_add_pushed

    @property
    def pending_adds(self) -> int:
        return len(self._queue)

    @property
    def failure(self) -> StorageError | None:
        """The error that stopped this writer, if any."""
        return self._failure

    @property
    def ensemble(self) -> tuple[str, ...]:
        """The bookies currently written to, by position."""
        return tuple(self._ensemble)

    # ---- adds --------------------------------------------------------------

    def add_entry_async(self, payload: bytes) -> asyncio.Future:
        """Start adding ``payload``; the future resolves with its entry id once acknowledged.

        The future fails with LedgerFencedError (a recovery took the ledger
        over), LedgerClosedError (this handle is closing/closed),
        FrameTooLargeError (payload above ``max_entry_bytes``),
        TooManyPendingAddsError (the handle's bound on adds in flight is
        reached), or the error that failed the handle (NotEnoughBookiesError,
        PlacementPolicyError, UnauthorizedError, NoSuchLedgerError, ...).
        """
        fut = self._loop.create_future()
        if type(payload) is not bytes:
            payload = bytes(payload)
        if self._refuse(fut, payload):
            return fut
        if not self._admission.try_admit(len(payload)):
            fut.set_exception(self._too_many())
            return fut
        return self._start_add(payload, fut)

    async def add_entry(self, payload: bytes) -> int:
        """Add one entry and wait for its acknowledgement; returns its entry id. Over the bound on adds in
        flight it first waits for room, in turn. Raises as add_entry_async."""
        fut = self._loop.create_future()
        if type(payload) is not bytes:
            payload = bytes(payload)
        if self._refuse(fut, payload):
            return await fut
        if not self._admission.try_admit(len(payload)):
            try:
                await asyncio.wait_for(self._admission.admit(len(payload)),
                                       self._ctx.config.wait_timeout_on_backpressure_s)
            except asyncio.TimeoutError:
                raise self._too_many() from None
            if self._refuse(fut, payload):  # the handle failed or closed while this add waited
                self._admission.release(len(payload))
                return await fut
        return await self._start_add(payload, fut)

    def _refuse(self, fut: asyncio.Future, payload: bytes) -> bool:
        """Fail ``fut`` when this handle cannot take the add at all."""
        if self._failure is not None:
            fut.set_exception(_copy(self._failure))
        elif self._state != _OPEN:
            fut.set_exception(LedgerClosedError(f"ledger {self.ledger_id}: handle is {self._state}; no more adds"))
        elif len(payload) > self._ctx.config.max_entry_bytes:
            fut.set_exception(FrameTooLargeError(
                f"entry of {len(payload)} bytes exceeds max_entry_bytes {self._ctx.config.max_entry_bytes}"))
        return fut.done()

    def _too_many(self) -> TooManyPendingAddsError:
        a = self._admission
        return TooManyPendingAddsError(f"ledger {self.ledger_id} has {a.entries} adds ({a.bytes} bytes) in flight, "
                                       f"its bound is {a.max_entries} adds or {a.max_bytes} bytes")

    def _start_add(self, payload: bytes, fut: asyncio.Future) -> asyncio.Future:
        """An admitted add: its room is given back when it is answered, whichever way."""
        fut.add_done_callback(lambda _f, n=len(payload): self._admission.release(n))
        eid = self._last_add_pushed + 1
        self._last_add_pushed = eid
        self._pushed_length += len(payload)
        body = digest.package(self._metadata.ledger_id, eid, self._lac, self._pushed_length, payload)
        self._push(PendingAdd(eid, body, self._pushed_length, self._positions[eid % len(self._positions)], fut))
        return fut

    def _add_recovered(self, entry_id: int, body: bytes, length: int) -> asyncio.Future:
        """Recovery: re-add an entry read from a replica, verbatim, at its own id."""
        fut = self._loop.create_future()
        if self._failure is not None:
            fut.set_exception(_copy(self._failure))
            return fut
        if entry_id != self._last_add_pushed + 1:
            raise ValueError(f"recovered entry {entry_id} does not follow {self._last_add_pushed}")
        self._last_add_pushed = entry_id
        self._pushed_length = length
        self._push(PendingAdd(entry_id, body, length, self._positions[entry_id % len(self._positions)], fut))
        return fut

    def _push(self, add: PendingAdd) -> None:
        self._queue.push(add)
        self._ctx.stats.adds += 1
        for pos in add.positions:
            if pos not in self._to_replace:  # a position being replaced gets the entry after the change
                self._send(add, pos)

    def _send(self, add: PendingAdd, pos: int) -> None:
        bookie = self._ensemble[pos]
        add.sent(pos, bookie)
        fut = self._ctx.pool.add(bookie, self._metadata.ledger_id, add.entry_id, self._key, add.body, recovery=self._recovery)
        fut.add_done_callback(partial(self._on_add_done, add, pos, bookie))

    def _on_add_done(self, add: PendingAdd, pos: int, bookie: str, fut: asyncio.Future) -> None:
        exc = BookieUnavailableError("add cancelled") if fut.cancelled() else fut.exception()
        if self._failure is not None:
            return
        if exc is None:
            if add.record_ack(pos, bookie) and len(add.acked) >= self._metadata.ack_quorum_size:
                self._complete_ready()
            return
        if not add.is_current(pos, bookie):
            return  # an answer from a bookie this position no longer uses
        if isinstance(exc, (LedgerFencedError, LedgerClosedError)):
            self._fail(
                LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced by a recovery: bookie {bookie} refused entry {add.entry_id} ({exc})"
                )
            )
        elif isinstance(exc, _FATAL):
            self._fail(exc)
        else:
            self._bookie_failed(pos, bookie, exc)

    def _complete_ready(self) -> None:
        for add in self._queue.ready():
            self._lac = add.entry_id
            self._confirmed_length = add.length
            if not add.future.done():
                add.future.set_result(add.entry_id)
        if not self._queue:
            self._wake_idle()

    # ---- failures ----------------------------------------------------------

    def _bookie_failed(self, pos: int, bookie: str, exc: BaseException) -> None:
        if self._ensemble[pos] != bookie or pos in self._to_replace:
            return
        log.warning("ledger %d: bookie %s at position %d failed (%s); changing ensemble", self.ledger_id, bookie, pos, exc)
        self._to_replace[pos] = bookie
        self._failed_bookies.add(bookie)
        if self._change_task is None:
            self._change_task = self._loop.create_task(EnsembleChange(self).run())

    def _bookies_changed(self, registered: set[str]) -> None:
        """The registry changed: a bookie of the current ensemble that left is replaced now."""
        if self._recovery or self._state == _CLOSED or self._failure is not None:
            return
        for pos, bookie in enumerate(self._ensemble):
            if bookie not in registered:
                self._bookie_failed(pos, bookie, BookieUnavailableError(f"bookie {bookie} is no longer registered"))

    def _fail(self, exc: StorageError) -> None:
        """Stop writing: every pending and later add fails with ``exc``."""
        if self._failure is not None:
            return
        log.warning("ledger %d: writer stopped: %s", self.ledger_id, exc)
        self._failure = exc
        for add in self._queue.drain():
            if not add.future.done():
                add.future.set_exception(_copy(exc))
        self._wake_idle()

    def _abort(self, exc: StorageError) -> None:
        """Fail the handle and stop any ensemble change in progress (the client is closing)."""
        if self._state == _CLOSED:
            return
        self._fail(exc)
        if self._change_task is not None:
            self._change_task.cancel()

    def _install_ensemble(self, metadata: LedgerMetadata, version: int, replaced: dict[int, str]) -> None:
        """After the new fragment is written: switch positions and re-send what they lack."""
        self._metadata = metadata
        self._version = version
        self._ensemble = list(metadata.current_ensemble)
        for pos, old in replaced.items():
            if self._to_replace.get(pos) == old:
                del self._to_replace[pos]
        for add in self._queue:
            for pos in add.positions:
                if pos in replaced and pos not in self._to_replace:
                    self._send(add, pos)

    # ---- idle / close ------------------------------------------------------

    def _idle(self) -> bool:
        return (not self._queue or self._failure is not None) and self._change_task is None

    def _wake_idle(self) -> None:
        if self._idle_waiters and self._idle():
            waiters, self._idle_waiters = self._idle_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    async def _wait_idle(self) -> None:
        """Until nothing is pending (or the handle failed) and no ensemble change runs."""
        while not self._idle():
            w = self._loop.create_future()
            self._idle_waiters.append(w)
            await w

    async def close(self) -> None:
        """Wait for pending adds, then close the ledger: state CLOSED, final last entry id and length.

        Idempotent. Raises LedgerFencedError when a recovery took the ledger
        over (the recoverer closes it), NoSuchLedgerError when it was deleted,
        LedgerMetadataError when the metadata kept changing under us.
        """
        if self._close_task is None:
            if self._state == _OPEN:
                self._state = _CLOSING
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        try:
            await self._wait_idle()
            if isinstance(self._failure, _LOST):
                raise _copy(self._failure)
            if not self._recovery:
                await self._close_metadata()
        finally:
            self._state = _CLOSED
            await super().close()

    async def _close_metadata(self) -> None:
        store = self._ctx.store
        path = paths.ledger_path(self.ledger_id)
        md, version = self._metadata, self._version
        for _ in range(self._ctx.config.max_ensemble_change_attempts):
            closed = md.with_state(LedgerState.CLOSED, last_entry_id=self._lac, length=self._confirmed_length)
            try:
                stat = await store.set(path, closed.to_bytes(), version)
            except NoNodeError as exc:
                raise NoSuchLedgerError(f"ledger {self.ledger_id} was deleted before it was closed") from exc
            except BadVersionError:
                data, stat = await store.get(path)
                current = LedgerMetadata.from_bytes(data)
                if current.is_closed and (current.last_entry_id, current.length) == (self._lac, self._confirmed_length):
                    self._apply_metadata(current, stat.version)
                    return
                if current.state is not LedgerState.OPEN:
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} was recovered by another client ({current.state.value}, "
                        f"last entry {current.last_entry_id}); this writer's close does not count"
                    )
                if current.ensembles != md.ensembles and not current.repaired_from(md):
                    raise LedgerMetadataError(f"ledger {self.ledger_id}: ensembles changed by another client")
                md, version = current, stat.version
                continue
            self._apply_metadata(closed, stat.version)
            return
        raise LedgerMetadataError(f"ledger {self.ledger_id}: could not close, metadata kept changing")

    async def _refresh_metadata(self) -> bool:
        """The writer's own view is authoritative, except that it adopts autorecovery's
        re-replication of earlier fragments (the only change anyone else may make)."""
        try:
            data, stat = await self._ctx.store.get(paths.ledger_path(self.ledger_id))
        except MetadataError:
            return False
        if stat.version <= self._version:
            return False
        current = LedgerMetadata.from_bytes(data)
        if not current.repaired_from(self._metadata):
            return False
        self._metadata, self._version = current, stat.version
        return True

    def _watch_metadata(self) -> None:
        pass
