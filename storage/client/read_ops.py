"""Reading entries and the LAC from bookies: one class per read operation.

How this works
--------------
``ReadEntries`` reads a range of entries. Each entry is asked of one replica
of its write set at a time, registered bookies first (an unregistered one is
probably dead); an error, a timeout or a digest mismatch moves on to the next
replica. A digest mismatch (or a body with the wrong ledger/entry ids) is
reported through ``ClientContext.report_bad_replica`` so the bad copy is
counted and can be repaired. The operation is callback-driven -- one future
per request, no task per entry -- with at most ``_MAX_IN_FLIGHT`` entries
outstanding, and results come back in entry order.

When every bookie of a fragment holds every entry (E == Qw, the common Pulsar
configuration), consecutive entries are fetched with BATCH_READ from one
bookie: far fewer frames for a catch-up read. A batch that fails or stops
short moves to the next bookie; whatever no batch served falls back to
per-entry reads, which carry the full replica fallback and reporting.

``read_lac`` asks every bookie of the current ensemble for its last add
confirmed (READ_LAC) and takes the maximum: the writer piggybacks its LAC on
every entry, so each bookie knows the LAC as of the last entry it received.
"""

from __future__ import annotations

import asyncio
from functools import partial

from storage import digest
from storage.client.context import ClientContext
from storage.errors import (
    DigestMismatchError,
    EntryCorruptedOnDiskError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadEntryError,
    StorageError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerMetadata

_MAX_IN_FLIGHT = 1024


def replica_order(ctx: ClientContext, bookies) -> list[str]:
    """Registered bookies first, in write-set order; unregistered (likely dead) ones last."""
    registry = ctx.registry
    live = [b for b in bookies if registry.is_registered(b)]
    if len(live) == len(bookies):
        return list(bookies)
    return live + [b for b in bookies if not registry.is_registered(b)]


class ReadEntries:
    """Read entries ``first..last`` (inclusive) of a ledger; ``await op.run()`` -> list of digest.Entry.

    Raises ReadEntryError (retriable) naming each replica's failure when some
    entry could be read from none of its replicas.
    """

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, first: int, last: int):
        if first < 0 or last < first:
            raise ValueError(f"invalid entry range {first}..{last}")
        self._ctx = ctx
        self._md = metadata
        self._lid = metadata.ledger_id
        self._first = first
        self._last = last
        self._results: list[digest.Entry | None] = [None] * (last - first + 1)
        self._missing = 0
        self._next = first
        self._done: asyncio.Future | None = None
        self._errors: dict[int, list[str]] = {}

    async def run(self) -> list[digest.Entry]:
        md = self._md
        if md.ensemble_size == md.write_quorum_size and self._last > self._first:
            await self._batch_reads()
        todo = [i for i, r in enumerate(self._results) if r is None]
        if todo:
            await self._entry_reads([self._first + i for i in todo])
        return self._results  # type: ignore[return-value]

    # ---- per-entry reads -------------------------------------------------

    async def _entry_reads(self, entry_ids: list[int]) -> None:
        self._done = asyncio.get_running_loop().create_future()
        self._queue = iter(entry_ids)
        self._missing = len(entry_ids)
        for _ in range(min(_MAX_IN_FLIGHT, len(entry_ids))):
            self._start_next()
        await self._done

    def _start_next(self) -> None:
        eid = next(self._queue, None)
        if eid is not None:
            self._try(eid, replica_order(self._ctx, self._md.write_set(eid)), 0)

    def _try(self, eid: int, replicas: list[str], i: int) -> None:
        if i == len(replicas):
            if not self._done.done():
                detail = "; ".join(self._errors.get(eid, [])) or "no replicas"
                self._done.set_exception(ReadEntryError(f"ledger {self._lid} entry {eid} unreadable: {detail}"))
            return
        fut = self._ctx.pool.read(replicas[i], self._lid, eid)
        fut.add_done_callback(partial(self._on_read, eid, replicas, i))

    def _on_read(self, eid: int, replicas: list[str], i: int, fut: asyncio.Future) -> None:
        exc = fut.exception() if not fut.cancelled() else StorageError("read cancelled")
        if self._done.done():
            return
        bookie = replicas[i]
        if exc is None:
            entry = self._check(bookie, eid, fut.result().body)
            if entry is not None:
                self._results[eid - self._first] = entry
                self._missing -= 1
                if self._missing == 0:
                    self._done.set_result(None)
                else:
                    self._start_next()
                return
            exc = DigestMismatchError("corrupt copy")
        if isinstance(exc, UnauthorizedError):
            self._done.set_exception(exc)  # wrong password: no replica will do better
            return
        if isinstance(exc, EntryCorruptedOnDiskError):  # the bookie found its own copy rotten
            self._ctx.report_bad_replica(self._lid, eid, bookie, str(exc))
        self._errors.setdefault(eid, []).append(f"{bookie}: {type(exc).__name__}: {exc}")
        self._try(eid, replicas, i + 1)

    def _check(self, bookie: str, eid: int, body: bytes | None) -> digest.Entry | None:
        """The verified entry, or None after reporting the bad replica."""
        if body is None:
            self._ctx.report_bad_replica(self._lid, eid, bookie, "empty body in an OK read response")
            return None
        try:
            return digest.verify(body, self._lid, eid)
        except DigestMismatchError as exc:
            self._ctx.report_bad_replica(self._lid, eid, bookie, str(exc))
            return None

    # ---- batch reads (E == Qw) --------------------------------------------

    async def _batch_reads(self) -> None:
        cfg = self._ctx.config
        pos = self._first
        while pos <= self._last:
            ensemble = self._md.ensemble_for(pos)
            end = self._fragment_end(pos)
            # Rotate the starting bookie by position so concurrent readers spread load.
            start = pos % len(ensemble)
            bookies = replica_order(self._ctx, ensemble[start:] + ensemble[:start])
            for bookie in bookies:
                if pos > end:
                    break
                pos = await self._batch_from(bookie, pos, end, cfg.batch_read_max_entries, cfg.batch_read_max_bytes)
            pos = end + 1  # leftovers in this fragment go to per-entry reads

    def _fragment_end(self, pos: int) -> int:
        for first, _ in self._md.ensembles:
            if first > pos:
                return min(self._last, first - 1)
        return self._last

    async def _batch_from(self, bookie: str, pos: int, end: int, max_entries: int, max_bytes: int) -> int:
        """Read pos..end from one bookie in batches; returns the first entry it did not serve."""
        while pos <= end:
            upto = min(end, pos + max_entries - 1)
            try:
                resp = await self._ctx.pool.batch_read(bookie, self._lid, pos, upto, max_bytes)
            except UnauthorizedError:
                raise
            except StorageError:
                return pos
            if not resp.bodies:
                return pos
            for body in resp.bodies:
                entry = self._check(bookie, pos, body)
                if entry is None:
                    return pos
                self._results[pos - self._first] = entry
                pos += 1
                if pos > upto:
                    break
        return pos


async def read_lac(ctx: ClientContext, metadata: LedgerMetadata) -> int:
    """Max LAC reported by the bookies of the current ensemble. Raises ReadEntryError if none answers."""
    lid = metadata.ledger_id
    ensemble = metadata.current_ensemble
    results = await asyncio.gather(*(ctx.pool.read_lac(b, lid) for b in ensemble), return_exceptions=True)
    lacs = []
    errors = []
    for bookie, res in zip(ensemble, results):
        if isinstance(res, (NoSuchLedgerError, NoSuchEntryError)):
            lacs.append(-1)  # the bookie has nothing of this ledger yet
        elif isinstance(res, BaseException):
            errors.append(f"{bookie}: {type(res).__name__}: {res}")
        else:
            lacs.append(res.lac)
    if not lacs:
        raise ReadEntryError(f"no bookie answered READ_LAC for ledger {lid}: {'; '.join(errors)}")
    return max(lacs)
