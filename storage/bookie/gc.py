"""Garbage collection: ledgers deleted from the metadata store leave the bookie, and their space is reclaimed.

A ledger is collected only when its metadata node is absent on two
consecutive passes, and a pass that could not reach the metadata store
deletes nothing. Both rules follow BookKeeper's caution: a ledger whose
metadata is being created right now, or a store hiccup, must never cost
data. After deleting, ``compact`` rewrites entry logs that fell below the
compaction threshold, which is what actually gives the disk space back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.errors import MetadataError
from storage.metadata import MetadataStore, paths

log = logging.getLogger(__name__)


def collectable(absent_now: set[int], absent_last_pass: set[int]) -> set[int]:
    """Ledgers to delete: absent from the metadata store on this pass and the previous one."""
    return absent_now & absent_last_pass


@dataclass
class GcResult:
    deleted_ledgers: list[int] = field(default_factory=list)
    reclaimed_bytes: int = 0


class GarbageCollector:
    def __init__(self, bookie: Bookie, store: MetadataStore, config: BookieConfig):
        self._bookie = bookie
        self._store = store
        self._config = config
        self._absent_last_pass: set[int] = set()

    async def run_once(self) -> GcResult:
        result = GcResult()
        try:
            absent = {lid for lid in self._bookie.ledger_ids()
                      if await self._store.exists(paths.ledger_path(lid)) is None}
        except MetadataError as exc:
            log.warning("GC pass skipped: metadata store unavailable (%s)", exc)
            return result
        doomed = collectable(absent, self._absent_last_pass)
        self._absent_last_pass = absent - doomed
        for ledger_id in sorted(doomed):
            await self._bookie.delete_ledger(ledger_id)
            result.deleted_ledgers.append(ledger_id)
        result.reclaimed_bytes = await self._bookie.compact(self._config.compaction_threshold)
        if result.deleted_ledgers or result.reclaimed_bytes:
            log.info("GC deleted ledgers %s, reclaimed %d bytes", result.deleted_ledgers, result.reclaimed_bytes)
        return result

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.gc_interval_ms / 1000)  # the GC period, not synchronisation
            try:
                await self.run_once()
            except Exception:  # GC must never take the bookie down
                log.exception("GC pass failed")
