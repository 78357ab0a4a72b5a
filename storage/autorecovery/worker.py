"""Replication workers: take a marked ledger under a lock, bring every fragment back to full strength.

How a repair works (``LedgerRepair``)
-------------------------------------
1. Read the ledger's metadata and the registered bookies, and plan
   (``checker.plan_repair``): every position of a finished fragment held by
   a bookie that is gone -- or that an operator asked to move off -- gets a
   new bookie, chosen by the zone-aware ``placement.replace_bookie`` (the
   write sets through it still span the zones the policy asks for).
2. Check the live bookies of every finished fragment: each entry they should
   hold is read back and its digest verified (the first and last entry of
   the fragment for a loss report; every entry when the mark asks for a
   check, as a scrub report does). A bookie answering that an entry is
   missing or corrupt gets the entry re-written from a good copy.
3. Copy: every entry a replaced position held is read from a surviving
   replica (digest verified), written to the new bookie as a recovery add
   (bookies accept those on closed and fenced ledgers), then read back from
   the new bookie and verified.
4. Swap: one conditional write of the ledger metadata puts the new bookies
   in those fragments. On a version conflict the metadata is re-read: if the
   fragments still hold the bookies we copied from, the swap is applied to
   the new version (a writer may have added a fragment or closed the
   ledger); if someone else already changed them (a second worker raced us),
   the attempt fails with ``ReplicationError`` and the next look at the
   ledger finds nothing left to do. Our copies then sit on a bookie the
   metadata does not name -- harmless, never read.

The writing fragment of an open ledger is its writer's: a live writer
replaces a lost bookie itself (ensemble change). If it still names a gone
bookie after ``open_ledger_rereplication_grace_period_s`` the writer is
presumed dead, and the worker recovers the ledger (fence + close, exactly
as a new owner would) before repairing it like a closed one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from typing import Callable

from storage import digest
from storage.autorecovery import checker
from storage.autorecovery.config import AutoRecoveryConfig
from storage.autorecovery.underreplication import Claim, Mark, UnderReplication
from storage.client.client import LedgerClient
from storage.client.context import ClientContext
from storage.client.placement import replace_bookie
from storage.client.read_ops import replica_order
from storage.errors import (
    BadVersionError,
    DigestMismatchError,
    EntryCorruptedOnDiskError,
    NoNodeError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PlacementPolicyError,
    ReplicationError,
    StorageError,
)
from storage.ledger_metadata import LedgerMetadata, master_key
from storage.metadata import paths

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    REPAIRED = "repaired"  # nothing left to do: the mark may go
    GONE = "gone"  # the ledger was deleted
    NEEDS_FENCE = "needs_fence"  # the writing fragment names a gone bookie
    WAIT_FOR_WRITER = "wait_for_writer"  # the writing fragment names a live bookie to move off


class RepairStats:
    """Counters a repair adds to (the service exports them as Prometheus metrics)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.entries = 0
        self.entries_rewritten = 0  # missing/corrupt copies fixed in place
        self.fragments = 0
        self.on_bytes: Callable[[int], None] | None = None

    def copied(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.entries += 1
        if self.on_bytes is not None:
            self.on_bytes(nbytes)


class LedgerRepair:
    """``await LedgerRepair(ctx, ledger_id, mark).run()`` -> Outcome. Raises ReplicationError (retriable)."""

    def __init__(self, ctx: ClientContext, ledger_id: int, mark: Mark, *, window: int = 256,
                 stats: RepairStats | None = None):
        self._ctx = ctx
        self._lid = ledger_id
        self._mark = mark
        self._window = window
        self._stats = stats or RepairStats()
        self._path = paths.ledger_path(ledger_id)

    async def run(self) -> Outcome:
        try:
            data, stat = await self._ctx.store.get(self._path)
        except NoNodeError:
            return Outcome.GONE
        md = LedgerMetadata.from_bytes(data)
        self._key = master_key(md.password)
        await self._ctx.registry.refresh()
        registered = {b.bookie_id for b in self._ctx.registry.bookies()}
        plan = checker.plan_repair(md, registered, self._mark.replace)
        if plan.writing_fragment_blocked:
            return Outcome.NEEDS_FENCE
        moving = {md.ensembles[i][1][p] for i, ps in plan.replace.items() for p in ps}
        await self._check_live_copies(md, registered, moving)
        if plan.replace:
            new_ensembles = await self._choose(md, plan.replace, registered)
            for index, ensemble in new_ensembles.items():
                await self._copy_fragment(md, index, ensemble, registered)
            await self._swap(md, stat.version, new_ensembles)
        return Outcome.WAIT_FOR_WRITER if plan.writing_fragment_waiting else Outcome.REPAIRED

    # ---- live copies ---------------------------------------------------------

    async def _check_live_copies(self, md: LedgerMetadata, registered: set[str], moving: set[str]) -> None:
        """Read back what each live bookie should hold; re-write a missing or corrupt entry in place."""
        jobs = []
        for frag in checker.fragments(md):
            if frag.writing or frag.empty:
                continue
            for pos, bookie in enumerate(frag.ensemble):
                if bookie not in registered or bookie in moving:
                    continue
                for eid in checker.sample_entries(checker.entries_at(md, frag, pos), self._mark.check):
                    jobs.append((bookie, eid))
        await self._bounded([self._check_one(md, bookie, eid, registered) for bookie, eid in jobs])

    async def _check_one(self, md: LedgerMetadata, bookie: str, eid: int, registered: set[str]) -> None:
        try:
            resp = await self._ctx.pool.read(bookie, self._lid, eid)
            digest.verify(resp.body or b"", self._lid, eid)
            return
        except (NoSuchEntryError, NoSuchLedgerError) as exc:
            why = f"missing ({type(exc).__name__})"
        except (EntryCorruptedOnDiskError, DigestMismatchError) as exc:
            why = f"corrupt ({exc})"
            self._ctx.report_bad_replica(self._lid, eid, bookie, str(exc))
        except StorageError as exc:
            raise ReplicationError(f"ledger {self._lid}: cannot check entry {eid} on {bookie}: {exc}") from exc
        log.warning("ledger %d entry %d on %s is %s: re-writing it from a good copy", self._lid, eid, bookie, why)
        body = await self._good_copy(md, eid, {bookie}, registered)
        await self._write(bookie, eid, body)
        self._stats.entries_rewritten += 1

    # ---- replacement -----------------------------------------------------------

    async def _choose(self, md: LedgerMetadata, replace: dict[int, tuple[int, ...]],
                      registered: set[str]) -> dict[int, tuple[str, ...]]:
        ctx = self._ctx
        candidates = ctx.registry.bookies()
        leaving = {md.ensembles[i][1][p] for i, ps in replace.items() for p in ps}
        out = {}
        for index, positions in sorted(replace.items()):
            ensemble = md.ensembles[index][1]
            for pos in positions:
                try:
                    placement = replace_bookie(ensemble, pos, candidates, md.write_quorum_size,
                                               exclude=leaving, policy=ctx.config.placement, rng=ctx.rng)
                except (NotEnoughBookiesError, PlacementPolicyError) as exc:
                    raise ReplicationError(f"ledger {self._lid}: no bookie to take over from "
                                           f"{ensemble[pos]}: {exc}") from exc
                ctx.stats.record_placement_warnings(placement.warnings)
                ensemble = placement.ensemble
            out[index] = tuple(ensemble)
        return out

    async def _copy_fragment(self, md: LedgerMetadata, index: int, new: tuple[str, ...], registered: set[str]) -> None:
        frag = checker.fragments(md)[index]
        old = frag.ensemble
        if frag.empty:
            return
        jobs = []
        for pos, (was, now) in enumerate(zip(old, new)):
            if was != now:
                jobs += [(now, was, eid) for eid in checker.entries_at(md, frag, pos)]
        leaving = {was for _, was, _ in jobs}
        await self._bounded([self._copy_one(md, target, leaving, eid, registered) for target, _, eid in jobs])
        self._stats.fragments += 1
        log.info("ledger %d fragment from entry %d: copied %d entries to %s", self._lid, frag.first_entry_id,
                 len(jobs), ", ".join(sorted({t for t, _, _ in jobs})))

    async def _copy_one(self, md: LedgerMetadata, target: str, leaving: set[str], eid: int, registered: set[str]) -> None:
        body = await self._good_copy(md, eid, {target}, registered, prefer_not=leaving)
        await self._write(target, eid, body)
        # Read the copy back: the new bookie must serve exactly what we sent.
        try:
            resp = await self._ctx.pool.read(target, self._lid, eid)
            digest.verify(resp.body or b"", self._lid, eid)
        except StorageError as exc:
            raise ReplicationError(f"ledger {self._lid}: copy of entry {eid} on {target} does not verify: {exc}") from exc
        if resp.body != body:
            raise ReplicationError(f"ledger {self._lid}: copy of entry {eid} on {target} differs from its source")
        self._stats.copied(len(body))

    async def _good_copy(self, md: LedgerMetadata, eid: int, skip: set[str], registered: set[str],
                         prefer_not: set[str] = frozenset()) -> bytes:
        """A verified body of entry ``eid`` from some replica other than ``skip``. Raises ReplicationError."""
        replicas = [b for b in md.write_set(eid) if b not in skip and b in registered]
        replicas.sort(key=lambda b: b in prefer_not)  # a decommissioned bookie serves last, but serves
        errors = []
        for bookie in replica_order(self._ctx, replicas):
            try:
                resp = await self._ctx.pool.read(bookie, self._lid, eid)
                digest.verify(resp.body or b"", self._lid, eid)
                return resp.body
            except (EntryCorruptedOnDiskError, DigestMismatchError) as exc:
                self._ctx.report_bad_replica(self._lid, eid, bookie, str(exc))
                errors.append(f"{bookie}: corrupt")
            except StorageError as exc:
                errors.append(f"{bookie}: {type(exc).__name__}: {exc}")
        raise ReplicationError(f"ledger {self._lid}: no good copy of entry {eid} "
                               f"({'; '.join(errors) or 'no live replica'})")

    async def _write(self, bookie: str, eid: int, body: bytes) -> None:
        try:
            await self._ctx.pool.add(bookie, self._lid, eid, self._key, body, recovery=True)
        except StorageError as exc:
            raise ReplicationError(f"ledger {self._lid}: writing entry {eid} to {bookie} failed: {exc}") from exc

    async def _bounded(self, coros: list) -> None:
        """Run coroutines with at most ``window`` at once; the first failure cancels the rest."""
        if not coros:
            return
        slots = asyncio.Semaphore(self._window)

        async def one(coro):
            async with slots:
                await coro

        tasks = [asyncio.ensure_future(one(c)) for c in coros]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ---- metadata swap -----------------------------------------------------------

    async def _swap(self, md: LedgerMetadata, version: int, new_ensembles: dict[int, tuple[str, ...]]) -> None:
        ours = md
        for _ in range(10):
            updated = md
            for index, ensemble in new_ensembles.items():
                if md.ensembles[index] != ours.ensembles[index]:
                    raise ReplicationError(
                        f"ledger {self._lid}: fragment from entry {ours.ensembles[index][0]} was changed by "
                        "someone else while it was being copied")
                updated = updated.with_ensemble_replaced(index, ensemble)
            try:
                await self._ctx.store.set(self._path, updated.to_bytes(), version)
            except NoNodeError as exc:
                raise ReplicationError(f"ledger {self._lid} was deleted while being re-replicated") from exc
            except BadVersionError:
                data, stat = await self._ctx.store.get(self._path)
                md, version = LedgerMetadata.from_bytes(data), stat.version
                if len(md.ensembles) < len(ours.ensembles):
                    raise ReplicationError(f"ledger {self._lid}: fragments changed while being re-replicated")
                continue
            log.info("ledger %d: re-replicated fragments %s", self._lid,
                     "; ".join(f"from entry {md.ensembles[i][0]}: {', '.join(e)}" for i, e in new_ensembles.items()))
            return
        raise ReplicationError(f"ledger {self._lid}: metadata kept changing during the swap")


class ReplicationWorker:
    """Polls the marks, claims one ledger at a time, repairs it, resolves the mark.

    Several workers (one per bookie by default) share the work through the
    ephemeral locks; each walks the marks in its own random order.
    """

    def __init__(self, client: LedgerClient, config: AutoRecoveryConfig, owner: str, *,
                 stats: RepairStats | None = None, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None):
        self._client = client
        self._config = config
        self._owner = owner
        self._marks = UnderReplication(client.context.store)
        self._clock = clock
        self._rng = rng or random.Random()
        self.stats = stats or RepairStats()
        self.marked = 0  # marks seen on the last pass (the under-replicated gauge)
        self._blocked_since: dict[int, float] = {}  # ledger -> when its writing fragment was first seen blocked
        self._not_before: dict[int, float] = {}  # ledger -> earliest next attempt
        self.stopped = False  # see Auditor.stopped: cancellation alone may be swallowed

    async def run_forever(self) -> None:
        while not self.stopped:
            try:
                handled = await self.run_once()
            except StorageError as exc:
                log.warning("replication worker pass failed: %s", exc)
                handled = 0
            if not handled and not self.stopped:
                await asyncio.sleep(self._config.replication_poll_interval_s)  # the poll period

    async def run_once(self) -> int:
        """One pass over the marks; returns how many ledgers it resolved."""
        ids = await self._marks.list()
        self.marked = len(ids)
        self._rng.shuffle(ids)
        resolved = 0
        now = self._clock()
        for lid in ids:
            if self.stopped:
                break
            if self._not_before.get(lid, 0.0) > now:
                continue
            claim = await self._marks.claim(lid, self._owner)
            if claim is None:
                continue
            try:
                if await self._handle(claim):
                    resolved += 1
            finally:
                if not claim.released:
                    await self._marks.release(claim)
        for lid in [k for k in self._not_before if k not in ids]:
            del self._not_before[lid]
        return resolved

    async def _handle(self, claim: Claim) -> bool:
        lid = claim.ledger_id
        ctx = self._client.context
        try:
            outcome = await LedgerRepair(ctx, lid, claim.mark, window=self._config.copy_window_entries,
                                         stats=self.stats).run()
            if outcome is Outcome.NEEDS_FENCE:
                if not await self._fence_if_writer_gone(lid):
                    return False
                outcome = await LedgerRepair(ctx, lid, claim.mark, window=self._config.copy_window_entries,
                                             stats=self.stats).run()
        except StorageError as exc:
            log.warning("ledger %d: re-replication attempt failed, will retry: %s", lid, exc)
            self._not_before[lid] = self._clock() + 5 * self._config.replication_poll_interval_s
            return False
        if outcome is Outcome.WAIT_FOR_WRITER:
            # Its writer moves off the bookie on its next add (the bookie is read-only or going).
            self._not_before[lid] = self._clock() + max(1.0, self._config.replication_poll_interval_s)
            return False
        if outcome is Outcome.NEEDS_FENCE:
            self._not_before[lid] = self._clock() + self._config.replication_poll_interval_s
            return False
        self._blocked_since.pop(lid, None)
        if await self._marks.resolve(claim):
            log.info("ledger %d: fully replicated", lid)
            return True
        return False  # reported again meanwhile: the next pass looks again

    async def _fence_if_writer_gone(self, lid: int) -> bool:
        """After the grace period, recover (fence and close) an open ledger whose writing fragment lost a bookie."""
        now = self._clock()
        first_seen = self._blocked_since.setdefault(lid, now)
        grace = self._config.open_ledger_rereplication_grace_period_s
        if now - first_seen < grace:
            self._not_before[lid] = first_seen + grace
            return False
        md, _ = await self._client.get_metadata(lid)
        log.warning("ledger %d: its writing fragment still names a lost bookie after %.0fs; "
                    "presuming the writer dead and recovering the ledger", lid, grace)
        handle = await self._client.open_ledger(lid, recovery=True, password=md.password)
        await handle.close()
        self._blocked_since.pop(lid, None)
        return True
