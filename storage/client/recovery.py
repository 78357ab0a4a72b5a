"""LedgerRecovery: take a ledger over from its (possibly dead) writer and close it.

How this works
--------------
1. Read the metadata. CLOSED: nothing to do. Otherwise write IN_RECOVERY by
   a conditional write: from then on the old writer's ensemble changes and
   close fail on the version.
2. Fence: send READ(LAST_ENTRY, FLAG_FENCE) to every bookie of the last
   fragment's ensemble. A fenced bookie refuses the old writer's adds. Wait
   until every write set has answers from at least Qw - Qa + 1 of its
   bookies: then no write set has Qa unfenced bookies left, so the old
   writer can never again get an add acknowledged. Fewer answers ->
   ``LedgerRecoveryError`` (retriable). Each answer is that bookie's last
   entry, carrying the LAC piggybacked when it was written; take the max.
3. Every entry up to that LAC is acknowledged. Read forward from LAC + 1,
   every read with FLAG_FENCE too (as BookKeeper does): a bookie answers a
   fencing read only once its fence -- and so every add queued before it --
   is durable. A plain read could reach a slow bookie whose journal still
   holds an add of the old writer: "no such entry" now, an acknowledgement
   a moment later, and recovery would close the ledger without an entry the
   writer saw acknowledged. A fencing read makes "missing" mean "missing
   for good" (a straggler from step 2 gets fenced here at the latest):
   an entry found on any replica is re-added verbatim with FLAG_RECOVERY to
   its full write set (through a recovery-mode ``LedgerHandle``, so failed
   bookies get an ensemble change here too); stop at the first entry that is
   missing on >= Qw - Qa + 1 bookies of its write set -- it can never have
   reached Qa bookies, so it was never acknowledged.
4. Close with ``last_entry_id`` = last recovered entry and its length, by a
   conditional write.

Concurrent recoverers converge: a BadVersionError on any metadata write
re-reads; a CLOSED ledger is adopted as it is (whoever closed first wins);
otherwise the attempt is retried with backoff, up to ``recovery_max_attempts``.
"""

from __future__ import annotations

import asyncio
import logging

from storage import digest
from storage.client.backoff import Backoff
from storage.client.context import ClientContext
from storage.client.ledger_handle import LedgerHandle
from storage.client.placement import write_sets
from storage.client.read_ops import ReadEntries, replica_order
from storage.errors import (
    BadVersionError,
    DigestMismatchError,
    LedgerRecoveryError,
    MetadataConnectionError,
    NoNodeError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadEntryError,
    StorageError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key
from storage.metadata import paths
from storage.protocol import LAST_ENTRY

log = logging.getLogger(__name__)

_MISSING = object()
_NOT_THERE = (NoSuchEntryError, NoSuchLedgerError)


def _consume(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class _Retry(Exception):
    """This attempt lost a race; start over (after backoff)."""


class LedgerRecovery:
    """``await LedgerRecovery(ctx, ledger_id).run()`` -> (closed metadata, version)."""

    def __init__(self, ctx: ClientContext, ledger_id: int):
        self._ctx = ctx
        self._lid = ledger_id
        self._path = paths.ledger_path(ledger_id)

    async def run(self) -> tuple[LedgerMetadata, int]:
        """Raises NoSuchLedgerError, UnauthorizedError, LedgerRecoveryError (after all attempts)."""
        ctx = self._ctx
        backoff = Backoff(ctx.config, ctx.rng)
        last_error: BaseException | None = None
        for attempt in range(1, ctx.config.recovery_max_attempts + 1):
            try:
                result = await self._attempt()
                ctx.stats.recoveries += 1
                return result
            except (_Retry, LedgerRecoveryError, ReadEntryError, MetadataConnectionError) as exc:
                last_error = exc
                log.info("ledger %d: recovery attempt %d failed: %s", self._lid, attempt, exc)
            except StorageError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
            await asyncio.sleep(backoff.next_delay())
        raise LedgerRecoveryError(
            f"ledger {self._lid}: recovery failed after {ctx.config.recovery_max_attempts} attempts: {last_error}"
        ) from last_error

    async def _read(self) -> tuple[LedgerMetadata, int]:
        try:
            data, stat = await self._ctx.store.get(self._path)
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {self._lid} does not exist") from exc
        return LedgerMetadata.from_bytes(data), stat.version

    async def _attempt(self) -> tuple[LedgerMetadata, int]:
        md, version = await self._read()
        if md.is_closed:
            return md, version
        marked = md.with_state(LedgerState.IN_RECOVERY)
        try:
            stat = await self._ctx.store.set(self._path, marked.to_bytes(), version)
        except BadVersionError as exc:
            raise _Retry(f"ledger {self._lid} changed while marking it IN_RECOVERY") from exc
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {self._lid} was deleted") from exc
        md, version = marked, stat.version

        lac = await self._fence(md)
        length = await self._length_at(md, lac)
        writer = LedgerHandle(self._ctx, md, version, recovery=True, last_add_confirmed=lac, length=length)
        try:
            await self._recover_entries(md, writer, lac)
            await writer._wait_idle()
            if writer.failure is not None:
                raise LedgerRecoveryError(f"ledger {self._lid}: re-adding entries failed: {writer.failure}")
        finally:
            await writer.close()
        log.info("ledger %d: recovered up to entry %d (LAC was %d)", self._lid, writer.last_add_confirmed, lac)
        return await self._close(writer.metadata, writer.version, writer.last_add_confirmed, writer._confirmed_length)

    # ---- fencing -----------------------------------------------------------

    async def _fence(self, md: LedgerMetadata) -> int:
        """Fence the last ensemble; returns the highest LAC the answering bookies know."""
        ctx = self._ctx
        key = master_key(md.password)
        ensemble = md.current_ensemble
        need = md.write_quorum_size - md.ack_quorum_size + 1
        windows = write_sets(len(ensemble), md.write_quorum_size)
        futures = {ctx.pool.read(b, self._lid, LAST_ENTRY, fence=True, master_key=key): pos for pos, b in enumerate(ensemble)}
        answered: set[int] = set()
        errors: list[str] = []
        max_lac = -1
        pending = set(futures)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                pos = futures[fut]
                bookie = ensemble[pos]
                exc = fut.exception()
                if exc is None:
                    body = fut.result().body
                    try:
                        entry = digest.unpack(body) if body is not None else None
                    except DigestMismatchError as bad:
                        ctx.report_bad_replica(self._lid, -1, bookie, f"last entry: {bad}")
                        errors.append(f"{bookie}: corrupt last entry")
                        continue
                    answered.add(pos)
                    if entry is not None:
                        max_lac = max(max_lac, entry.lac)
                elif isinstance(exc, _NOT_THERE):
                    answered.add(pos)  # fenced, and it holds nothing of this ledger
                elif isinstance(exc, UnauthorizedError):
                    raise exc
                else:
                    errors.append(f"{bookie}: {type(exc).__name__}: {exc}")
            if all(sum(p in answered for p in w) >= need for w in windows):
                for fut in pending:  # stragglers still fence; nobody waits for their answers
                    fut.add_done_callback(_consume)
                return max_lac
        raise LedgerRecoveryError(
            f"ledger {self._lid}: could not fence enough bookies (need {need} of every write set of "
            f"{', '.join(ensemble)}): {'; '.join(errors)}"
        )

    async def _length_at(self, md: LedgerMetadata, lac: int) -> int:
        if lac < 0:
            return 0
        (entry,) = await ReadEntries(self._ctx, md, lac, lac).run()
        return entry.length

    # ---- reading forward ---------------------------------------------------

    async def _recover_entries(self, md: LedgerMetadata, writer: LedgerHandle, lac: int) -> None:
        """Read from LAC+1 until the first provably unacknowledged entry, re-adding each one found."""
        window: dict[int, asyncio.Task] = {}
        next_read = lac + 1
        entry_id = lac + 1
        try:
            while True:
                while len(window) < self._ctx.config.recovery_read_parallelism:
                    window[next_read] = asyncio.ensure_future(self._recovery_read(md, next_read))
                    next_read += 1
                found = await window.pop(entry_id)
                if found is _MISSING:
                    return
                body, length = found
                writer._add_recovered(entry_id, body, length).add_done_callback(_consume)
                if writer.failure is not None:
                    raise LedgerRecoveryError(f"ledger {self._lid}: re-adding entries failed: {writer.failure}")
                entry_id += 1
        finally:
            for task in window.values():
                task.cancel()
            if window:
                await asyncio.gather(*window.values(), return_exceptions=True)

    async def _recovery_read(self, md: LedgerMetadata, entry_id: int):
        """(body, length) from some replica, or _MISSING when enough replicas lack it."""
        ctx = self._ctx
        need_missing = md.write_quorum_size - md.ack_quorum_size + 1
        key = master_key(md.password)
        missing = 0
        errors = []
        for bookie in replica_order(ctx, md.write_set(entry_id)):
            try:
                resp = await ctx.pool.read(bookie, self._lid, entry_id, fence=True, master_key=key)
            except _NOT_THERE:
                missing += 1
                if missing >= need_missing:
                    return _MISSING
                continue
            except UnauthorizedError:
                raise
            except StorageError as exc:
                errors.append(f"{bookie}: {type(exc).__name__}: {exc}")
                continue
            try:
                entry = digest.verify(resp.body if resp.body is not None else b"", self._lid, entry_id)
            except DigestMismatchError as exc:
                ctx.report_bad_replica(self._lid, entry_id, bookie, str(exc))
                errors.append(f"{bookie}: corrupt copy")
                continue
            return resp.body, entry.length
        raise LedgerRecoveryError(
            f"ledger {self._lid}: cannot tell whether entry {entry_id} exists "
            f"({missing} replicas lack it, need {need_missing}): {'; '.join(errors)}"
        )

    # ---- closing -----------------------------------------------------------

    async def _close(self, md: LedgerMetadata, version: int, last_entry_id: int, length: int):
        store = self._ctx.store
        closed = md.with_state(LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)
        while True:
            try:
                stat = await store.set(self._path, closed.to_bytes(), version)
                return closed, stat.version
            except NoNodeError as exc:
                raise NoSuchLedgerError(f"ledger {self._lid} was deleted during recovery") from exc
            except BadVersionError:
                current, version = await self._read()
                if current.is_closed:
                    return current, version  # another recoverer finished first: adopt its result
                if current.state is not LedgerState.IN_RECOVERY or current.ensembles != md.ensembles:
                    raise _Retry(f"ledger {self._lid} changed under recovery")
                # Another recoverer marked it too but has not closed: our result is
                # as valid as theirs (both fenced), so close on the new version.
                closed = current.with_state(LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)
