"""Scrubbing: find bit rot in this bookie's entry logs before a reader does.

Every ``local_scrub_period_s`` (0: off, as BookKeeper's ``localScrubPeriod``)
the scrubber reads every entry the bookie holds straight from its entry log
-- no cache -- and verifies its digest, at most
``local_scrub_rate_limit_entries_per_s`` entries a second so a scrub never
competes with clients for the disk. An entry that fails is reported by
marking its ledger under-replicated with a full check
(``storage.autorecovery``): a replication worker then re-reads every
replica, and re-writes the bad copy here from a good one (the new copy
lands in the write cache and, at the next checkpoint, in a fresh entry-log
record the index points to).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter

from storage.autorecovery.underreplication import Mark, UnderReplication
from storage.bookie.bookie import Bookie
from storage.errors import EntryCorruptedOnDiskError, MetadataError, NoSuchLedgerError, StorageError
from storage.metadata import MetadataStore

log = logging.getLogger(__name__)


def pause_s(done: int, elapsed_s: float, rate_per_s: float) -> float:
    """How long to wait before the next entry so ``done`` entries take at least ``done / rate`` seconds."""
    return max(0.0, done / rate_per_s - elapsed_s)


@dataclass
class ScrubResult:
    entries: int = 0
    bytes: int = 0
    corrupt: list[tuple[int, int]] = field(default_factory=list)  # (ledger, entry)


class Scrubber:
    def __init__(self, bookie: Bookie, store: MetadataStore, period_s: float, rate_per_s: float,
                 registry: CollectorRegistry | None = None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self._bookie = bookie
        self._marks = UnderReplication(store)
        self._period_s = period_s
        self._rate = rate_per_s
        self._clock = clock
        self._sleep = sleep
        self.passes = 0
        self.stopped = False  # a cancellation racing a ZooKeeper answer can be swallowed (Python 3.11 wait_for)
        self._scrubbed = Counter("bookie_scrub_entries", "Entries verified by the scrubber", registry=registry) \
            if registry is not None else None
        self._corrupt = Counter("bookie_scrub_corrupt_entries", "Entries the scrubber found corrupt",
                                registry=registry) if registry is not None else None

    async def run_forever(self) -> None:
        while not self.stopped:
            await self._sleep(self._period_s)  # the scrub period
            try:
                await self.run_once()
            except Exception:  # scrubbing must never take the bookie down
                log.exception("scrub pass failed")

    async def run_once(self) -> ScrubResult:
        result = ScrubResult()
        started = self._clock()
        for lid in self._bookie.ledger_ids():
            try:
                last = self._bookie.last_entry_id(lid)
            except NoSuchLedgerError:
                continue  # deleted meanwhile
            bad = False
            for eid in range(last + 1):
                try:
                    size = await self._bookie.verify_on_disk(lid, eid)
                except EntryCorruptedOnDiskError as exc:
                    log.error("scrub: ledger %d entry %d is corrupt on disk: %s", lid, eid, exc)
                    result.corrupt.append((lid, eid))
                    bad = True
                    size = 0
                except NoSuchLedgerError:
                    break
                except StorageError as exc:
                    log.warning("scrub: cannot read ledger %d entry %d: %s", lid, eid, exc)
                    continue
                if size:
                    result.entries += 1
                    result.bytes += size
                    await self._sleep(pause_s(result.entries, self._clock() - started, self._rate))
            if bad:
                await self._report(lid)
        self.passes += 1
        if self._scrubbed is not None:
            self._scrubbed.inc(result.entries)
            self._corrupt.inc(len(result.corrupt))
        log.info("scrub pass: %d entries, %d bytes verified, %d corrupt", result.entries, result.bytes,
                 len(result.corrupt))
        return result

    async def _report(self, lid: int) -> None:
        try:
            await self._marks.mark(lid, Mark(check=True))
        except MetadataError as exc:  # the next pass finds it again
            log.warning("scrub: could not report ledger %d: %s", lid, exc)
