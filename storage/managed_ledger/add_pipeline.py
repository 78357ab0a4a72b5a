"""The add pipeline of a managed ledger: the ledger being written, adds in flight, and rollover.

How it works:

- An add goes straight to the current ledger's pipelined writer
  (``WriteHandle.add_entry_async``), so adds complete in the order they
  were made; its position is the ledger id and the entry id the writer gave.
- Counting adds in flight, once the current ledger would be over its entry
  or byte quota (and older than the minimum rollover time), new adds queue
  and a **rollover** starts: it waits for the adds in flight, closes the
  ledger at its last add confirmed, creates a new ledger (one conditional
  write of the ledger list), and pushes the queue to it in order. A ledger
  older than the maximum rollover time rolls over the same way after its
  next add (or the next trim).
- A failed add (other than fencing) is retried on the next ledger, first the
  failed ones in their order, up to ``MAX_ADD_ATTEMPTS``. A fenced ledger
  fences the managed ledger: every add in the pipeline fails.

``should_roll`` and ``full_when_pushed`` are the pure decisions. What may
change the pipeline's state: ``add``, the writer's acknowledgements
(``_add_done``), the rollover task, ``fail_all`` (fencing) and ``close``.
The managed ledger's lifecycle stays with ManagedLedger; the pipeline only
reads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from storage.client import api
from storage.errors import LedgerFencedError, ManagedLedgerClosedError, ManagedLedgerFencedError, StorageError
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.lifecycle import ManagedLedgerState
from storage.managed_ledger.metadata import LedgerInfo
from storage.managed_ledger.position import Position

if TYPE_CHECKING:
    from storage.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)

MAX_ADD_ATTEMPTS = 3


def should_roll(ledger: LedgerInfo, now: float, config: ManagedLedgerConfig) -> bool:
    """Is the current ledger due to be replaced (full and old enough, or older than the maximum)?"""
    age = now - ledger.timestamp
    full = ledger.entries >= config.max_entries_per_ledger or ledger.size >= config.max_size_per_ledger_bytes
    return ledger.entries > 0 and ((full and age >= config.min_ledger_rollover_time_s)
                                   or age >= config.max_ledger_rollover_time_s)


def full_when_pushed(ledger: LedgerInfo, inflight_entries: int, inflight_bytes: int, now: float,
                     config: ManagedLedgerConfig) -> bool:
    """Counting adds in flight, would the current ledger be over its entry or size quota?"""
    if now - ledger.timestamp < config.min_ledger_rollover_time_s:
        return False
    return (ledger.entries + inflight_entries >= config.max_entries_per_ledger
            or ledger.size + inflight_bytes >= config.max_size_per_ledger_bytes)


class _OpAdd:
    __slots__ = ("data", "future", "attempts")

    def __init__(self, data: bytes, future: asyncio.Future):
        self.data = data
        self.future = future
        self.attempts = 0


class AddPipeline:
    def __init__(self, ml: "ManagedLedger"):
        self.ml = ml
        self.current: api.WriteHandle | None = None
        self.rolling: asyncio.Task | None = None
        self._queued: deque[_OpAdd] = deque()  # waiting for a writable ledger
        self._inflight: deque[_OpAdd] = deque()  # pushed to the current ledger, in order
        self._inflight_bytes = 0
        self._retry: list[_OpAdd] = []
        self._drained: asyncio.Future | None = None

    # ---- ledgers ---------------------------------------------------------------

    async def create_ledger(self) -> None:
        """Create the next ledger and add it to the list (a conditional write); it becomes the current one."""
        ml, c = self.ml, self.ml.config
        handle = await ml.client.create_ledger(
            c.ensemble_size, c.write_quorum_size, c.ack_quorum_size, password=ml.password,
            custom={"managed-ledger": ml.name}, **({} if c.min_zones is None else {"min_zones": c.min_zones}))
        ml.info.ledgers.append(LedgerInfo(handle.ledger_id, 0, 0, ml.clock()))
        try:
            await ml.write_info()
        except BaseException:
            ml.info.ledgers.pop()
            try:
                await handle.close()
                await ml.client.delete_ledger(handle.ledger_id)
            except StorageError:
                pass
            raise
        self.current = handle

    def roll_if_due(self) -> None:
        if self.current is not None and should_roll(self.ml.info.ledgers[-1], self.ml.clock(), self.ml.config):
            self._start_rollover()

    def _start_rollover(self) -> None:
        if self.rolling is None and self.ml.state is ManagedLedgerState.OPEN:
            self.rolling = asyncio.get_running_loop().create_task(self._rollover())

    async def _rollover(self) -> None:
        old, self.current = self.current, None  # new adds queue from here on
        try:
            if self._inflight:
                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
            if old is not None:
                await self._close_written_ledger(old)
            self._queued.extendleft(reversed(self._retry))
            self._retry.clear()
            await self.create_ledger()
            while self._queued and self.current is not None and not self._full_when_pushed():
                self._push(self._queued.popleft())
            self.ml._after_rollover()
        except ManagedLedgerFencedError as exc:
            self.ml.fence(exc)
        except StorageError as exc:
            log.warning("managed ledger %s could not start a new ledger: %s", self.ml.name, exc)
            while self._queued:
                op = self._queued.popleft()
                if not op.future.done():
                    op.future.set_exception(exc)
        finally:
            self.rolling = None
        if self._queued and self.ml.state is ManagedLedgerState.OPEN:
            self._start_rollover()  # the new ledger filled up (or could not be made): the rest go to the next

    async def _close_written_ledger(self, handle: api.WriteHandle) -> None:
        ml = self.ml
        info = ml.info.ledgers[-1]
        try:
            await handle.close()
        except LedgerFencedError as exc:
            ml.fence(exc)
            raise ManagedLedgerFencedError(f"{ml.name}: ledger {handle.ledger_id} was fenced") from exc
        except StorageError as exc:
            log.warning("closing ledger %d of %s: %s", handle.ledger_id, ml.name, exc)
        info.entries = handle.last_add_confirmed + 1
        if info.entries == 0:
            ml.info.ledgers.pop()
            ml.info.pending_deletion.append(handle.ledger_id)

    # ---- adds ------------------------------------------------------------------

    def add(self, data: bytes) -> asyncio.Future:
        """Start an add; the future resolves with its position (see ManagedLedger.add_entry)."""
        op = _OpAdd(bytes(data), asyncio.get_running_loop().create_future())
        if self.current is not None and self.rolling is None and not self._queued and not self._full_when_pushed():
            self._push(op)
        else:
            self._queued.append(op)
            if self.rolling is None:
                self._start_rollover()
        return op.future

    def _full_when_pushed(self) -> bool:
        return full_when_pushed(self.ml.info.ledgers[-1], len(self._inflight), self._inflight_bytes, self.ml.clock(),
                                self.ml.config)

    def _push(self, op: _OpAdd) -> None:
        handle = self.current
        op.attempts += 1
        self._inflight.append(op)
        self._inflight_bytes += len(op.data)
        handle.add_entry_async(op.data).add_done_callback(lambda f, op=op, h=handle: self._add_done(op, h, f))

    def _add_done(self, op: _OpAdd, handle: api.WriteHandle, fut: asyncio.Future) -> None:
        ml = self.ml
        if op in self._inflight:
            self._inflight.remove(op)
            self._inflight_bytes -= len(op.data)
        if ml.state is ManagedLedgerState.FENCED:
            return
        exc = ManagedLedgerClosedError(f"{ml.name} closed") if fut.cancelled() else fut.exception()
        if exc is None:
            position = Position(handle.ledger_id, fut.result())
            info = ml.info.ledgers[-1]
            info.entries += 1
            info.size += len(op.data)
            ml._record_add(position, op.data)
            if not op.future.done():
                op.future.set_result(position)
            ml._wake_waiters()
            if self.current is handle and should_roll(info, ml.clock(), ml.config):
                self._start_rollover()
        elif isinstance(exc, LedgerFencedError):
            ml.fence(exc)
            if not op.future.done():
                op.future.set_exception(ManagedLedgerFencedError(f"{ml.name}: ledger {handle.ledger_id} was fenced"))
        elif op.attempts >= MAX_ADD_ATTEMPTS:
            if not op.future.done():
                op.future.set_exception(exc)
        else:
            self._retry.append(op)  # failures arrive in order: the retry list keeps it
            if self.current is handle:
                self._start_rollover()
        if not self._inflight and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ---- fencing and closing -------------------------------------------------------

    def fail_all(self, err: StorageError) -> None:
        """Fail every add in the pipeline (the managed ledger was fenced)."""
        for op in [*self._inflight, *self._queued, *self._retry]:
            if not op.future.done():
                op.future.set_exception(err)
        self._inflight.clear()
        self._inflight_bytes = 0
        self._queued.clear()
        self._retry.clear()

    def cancel_rollover(self) -> None:
        if self.rolling is not None:
            self.rolling.cancel()

    async def close_current(self, fenced: bool) -> None:
        """Close the ledger being written (unless fenced: it is the new owner's to recover)."""
        if self.current is not None and not fenced:
            try:
                await self.current.close()
            except StorageError as exc:
                log.warning("closing the current ledger of %s: %s", self.ml.name, exc)
        self.current = None
