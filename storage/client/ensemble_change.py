"""EnsembleChange: replace failed bookies of a writing ledger without losing or reordering entries.

How this works
--------------
1. Hold the handle's add queue: acks are still recorded, but nothing
   completes, so the LAC is frozen for the duration and the new fragment's
   first entry ``LAC + 1`` stays correct (every entry below it already has
   Qa acks on the old ensemble; everything from it on may not).
2. For each failed position choose a replacement with the zone-aware
   ``placement.replace_bookie`` -- never a current member, never a bookie
   that already failed on this handle.
3. Write the metadata with the new fragment ``(LAC + 1, new ensemble)`` by a
   conditional write on the ledger node's version. On BadVersionError re-read
   it: if the ledger is no longer ours (a writer sees a state other than
   OPEN, a recovery writer one other than IN_RECOVERY) the handle fails --
   fenced for a writer; if the ensembles changed under us the handle fails
   too (nobody else may change them); if only the version moved, retry on
   the new version.
4. Install the new ensemble and re-send every pending entry whose write set
   includes a replaced position to the new bookie (its old ack, if any, is
   discarded: the position now means the new bookie).
5. Bookies that fail meanwhile are collected and handled by another round;
   when none are left, release the queue so acknowledged adds complete.

A replacement that cannot be found (NotEnoughBookiesError, or strict
placement refusing) fails the handle after one registry refresh, as
BookKeeper does; the owner then closes the ledger and starts a new one.

The change drives its writer through ``ChangingWriter``, the part of
``LedgerHandle`` it may touch, so this module does not import the handle
(the handle imports this one to start a change).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from storage.client.context import ClientContext
from storage.client.pending_add import AddQueue
from storage.client.placement import replace_bookie
from storage.errors import (
    BadVersionError,
    LedgerFencedError,
    LedgerMetadataError,
    LedgerRecoveryError,
    NoNodeError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PlacementPolicyError,
    StorageError,
    WriteError,
)
from storage.ledger_metadata import LedgerMetadata, LedgerState
from storage.metadata import paths

log = logging.getLogger(__name__)


class ChangingWriter(Protocol):
    """What an ensemble change reads and drives on the writer whose bookies it replaces (``LedgerHandle``)."""

    _ctx: ClientContext
    _queue: AddQueue  # held for the whole change: acks are recorded, nothing completes
    _metadata: LedgerMetadata
    _version: int
    _lac: int
    _recovery: bool
    _failure: StorageError | None
    _to_replace: dict[int, str]  # position -> failed bookie awaiting a replacement
    _failed_bookies: set[str]  # never chosen as a replacement
    _change_task: asyncio.Task | None  # this change, cleared when it ends

    @property
    def ledger_id(self) -> int: ...

    def _install_ensemble(self, metadata: LedgerMetadata, version: int, replaced: dict[int, str]) -> None:
        """Switch to the new fragment and re-send to the replacements what they lack."""

    def _fail(self, exc: StorageError) -> None:
        """Stop the writer: every pending and later add fails with ``exc``."""

    def _complete_ready(self) -> None:
        """Complete the adds that have their ack quorum, in order."""

    def _wake_idle(self) -> None:
        """Wake close() if nothing is pending any more."""


class EnsembleChange:
    def __init__(self, handle: ChangingWriter):
        self._h = handle
        self._ctx = handle._ctx

    async def run(self) -> None:
        h = self._h
        h._queue.hold()
        try:
            while h._to_replace and h._failure is None:
                failed = dict(h._to_replace)
                metadata, version, replaced = await self._write_fragment(failed)
                if h._failure is not None:
                    break
                log.info(
                    "ledger %d: ensemble change from entry %d: %s",
                    h.ledger_id, metadata.ensembles[-1][0],
                    ", ".join(f"{old} -> {metadata.current_ensemble[p]}" for p, old in replaced.items()),
                )
                h._install_ensemble(metadata, version, replaced)
                self._ctx.stats.ensemble_changes += 1
        except StorageError as exc:
            h._fail(exc)
        except Exception as exc:  # a bug must not leave the queue held forever
            log.exception("ledger %d: ensemble change crashed", h.ledger_id)
            h._fail(WriteError(f"ensemble change of ledger {h.ledger_id} failed: {exc!r}"))
        finally:
            h._queue.release()
            h._change_task = None
            if h._failure is None:
                h._complete_ready()
            h._wake_idle()

    async def _write_fragment(self, failed: dict[int, str]) -> tuple[LedgerMetadata, int, dict[int, str]]:
        h, ctx = self._h, self._ctx
        path = paths.ledger_path(h.ledger_id)
        md, version = h._metadata, h._version
        first_entry = h._lac + 1
        for _ in range(ctx.config.max_ensemble_change_attempts):
            ensemble, replaced = await self._choose(md.current_ensemble, failed)
            new_md = md.with_fragment(first_entry, ensemble)
            try:
                stat = await ctx.store.set(path, new_md.to_bytes(), version)
                return new_md, stat.version, replaced
            except NoNodeError as exc:
                raise NoSuchLedgerError(f"ledger {h.ledger_id} was deleted while writing") from exc
            except BadVersionError:
                md, version = await self._reread(path, md)
        raise WriteError(
            f"ledger {h.ledger_id}: ensemble change failed after {ctx.config.max_ensemble_change_attempts} "
            "attempts, the metadata kept changing"
        )

    async def _choose(self, current: tuple[str, ...], failed: dict[int, str]) -> tuple[tuple[str, ...], dict[int, str]]:
        h, ctx = self._h, self._ctx
        ensemble = tuple(current)
        replaced: dict[int, str] = {}
        for pos, bookie in sorted(failed.items()):
            if ensemble[pos] != bookie:
                continue
            for refreshed in (False, True):
                try:
                    placement = replace_bookie(
                        ensemble, pos, ctx.registry.bookies(), h._metadata.write_quorum_size,
                        exclude=h._failed_bookies, policy=h._placement, rng=ctx.rng,
                    )
                    break
                except (NotEnoughBookiesError, PlacementPolicyError):
                    if refreshed:
                        raise
                    # The watch may lag behind a bookie that just registered.
                    await ctx.registry.refresh()
            ctx.stats.record_placement_warnings(placement.warnings)
            ensemble = placement.ensemble
            replaced[pos] = bookie
        return ensemble, replaced

    async def _reread(self, path: str, ours: LedgerMetadata) -> tuple[LedgerMetadata, int]:
        """The current metadata, if this handle may still write under it; raises otherwise."""
        h = self._h
        data, stat = await self._ctx.store.get(path)
        current = LedgerMetadata.from_bytes(data)
        if h._recovery:
            if current.state is not LedgerState.IN_RECOVERY:
                raise LedgerRecoveryError(
                    f"ledger {h.ledger_id} became {current.state.value} while this client was recovering it"
                )
        elif current.state is not LedgerState.OPEN:
            raise LedgerFencedError(
                f"ledger {h.ledger_id} is {current.state.value}: another client is recovering or closed it"
            )
        # Autorecovery may have re-replicated an earlier fragment: adopt that,
        # but any other change to the ensembles means another writer.
        if current.ensembles != ours.ensembles and not current.repaired_from(ours):
            err = LedgerRecoveryError if h._recovery else LedgerMetadataError
            raise err(f"ledger {h.ledger_id}: another client changed its ensembles concurrently")
        return current, stat.version
