"""The auditor: one elected process that notices lost bookies and marks their ledgers under-replicated.

How this works
--------------
Election: every autorecovery process tries to create the ephemeral
``/ledgers/underreplication/auditorelection/auditor`` holding its id; the one
that succeeds is the auditor until its session ends, and the others watch
the node and try again when it goes (BookKeeper elects through the same
parent). The auditor checks on every tick that the node is still its own,
so an auditor whose session expired stops at once.

Loss: the auditor follows ``/ledgers/available`` (and ``readonly``) through a
``BookieRegistry``. ``LossTracker`` -- pure, clock injected -- remembers
since when each bookie has been gone; a bookie gone longer than
``lost_bookie_recovery_delay_s`` is *lost*, and a scan marks every ledger
with a fragment on it. A bookie that comes back within the delay costs
nothing (a restart is not a loss).

The scan also runs when a process becomes auditor and every
``auditor_periodic_check_interval_s``: every ledger's metadata is compared
with the registered bookies, and a bookie named there but not registered
starts its delay then. So a loss that happened while no auditor was
looking (an auditor failover) is still found, one delay later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from storage.autorecovery import checker
from storage.autorecovery.config import AutoRecoveryConfig
from storage.autorecovery.underreplication import AUDITOR, ELECTION, Mark, UnderReplication
from storage.client.client import LedgerClient
from storage.errors import MetadataError, NodeExistsError, NoNodeError, NoSuchLedgerError, StorageError

log = logging.getLogger(__name__)


@dataclass
class LossTracker:
    """Since when each bookie has been gone, and which losses are already reported. Pure."""

    gone_since: dict[str, float] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    def observe(self, registered: Iterable[str], expected: Iterable[str], now: float) -> None:
        """``expected``: bookies that should be there (seen registered before, or named by a ledger)."""
        live = set(registered)
        for bookie in live:
            self.gone_since.pop(bookie, None)
            self.reported.discard(bookie)
        for bookie in set(expected) - live:
            self.gone_since.setdefault(bookie, now)

    def due(self, now: float, delay_s: float) -> set[str]:
        """Bookies gone for at least ``delay_s`` and not yet reported."""
        return {b for b, t in self.gone_since.items() if now - t >= delay_s and b not in self.reported}

    def lost(self, now: float, delay_s: float) -> set[str]:
        """Every bookie gone for at least ``delay_s`` (reported or not)."""
        return {b for b, t in self.gone_since.items() if now - t >= delay_s}


class Auditor:
    """``await Auditor(client, config, owner).run_forever()``: stand for election, audit while elected."""

    def __init__(self, client: LedgerClient, config: AutoRecoveryConfig, owner: str, *,
                 clock: Callable[[], float] = time.monotonic):
        self._client = client
        self._store = client.context.store
        self._config = config
        self._owner = owner
        self._clock = clock
        self._marks = UnderReplication(self._store)
        self.tracker = LossTracker()
        self.is_auditor = False
        self.scans = 0
        self._known: set[str] = set()  # bookies ever seen registered by this auditor
        self._changed = asyncio.Event()
        # Python 3.11's wait_for (used by the ZooKeeper backend) can swallow a cancellation that
        # races with its result, so a loop stops on this flag too, not on cancellation alone.
        self.stopped = False

    async def run_forever(self) -> None:
        watch = self._store.watch_data(AUDITOR, lambda _e: self._changed.set())
        try:
            while not self.stopped:
                try:
                    if await self._elect():
                        await self._audit_while_elected()
                except StorageError as exc:
                    log.warning("auditor %s: %s", self._owner, exc)
                self.is_auditor = False
                self._changed.clear()
                try:  # wait for the auditor node to change, or re-check after a while (a missed event)
                    await asyncio.wait_for(self._changed.wait(), timeout=max(1.0, self._config.tick_s * 4))
                except asyncio.TimeoutError:
                    pass
        finally:
            watch.cancel()

    async def _elect(self) -> bool:
        await self._store.ensure_path(ELECTION)
        if self.stopped:
            return False
        try:
            await self._store.create(AUDITOR, self._owner.encode(), ephemeral=True)
        except NodeExistsError:
            return False
        log.info("%s is now the auditor", self._owner)
        return True

    async def resign(self) -> None:
        """Give up the auditor node (stopping); a store shared with others keeps its session."""
        try:
            stat = await self._store.exists(AUDITOR)
            if stat is not None and stat.ephemeral_owner == self._store.session_id:
                await self._store.delete(AUDITOR, stat.version)
        except MetadataError as exc:
            log.warning("auditor %s could not resign: %s", self._owner, exc)
        self.is_auditor = False

    async def _still_elected(self) -> bool:
        stat = await self._store.exists(AUDITOR)
        return stat is not None and stat.ephemeral_owner == self._store.session_id

    async def _audit_while_elected(self) -> None:
        self.is_auditor = True
        self.tracker = LossTracker()  # a new term starts its clocks afresh
        await self.scan()
        next_full = self._clock() + self._config.auditor_periodic_check_interval_s
        while not self.stopped and await self._still_elected():
            await self.tick()
            if self._clock() >= next_full:
                await self.scan()
                next_full = self._clock() + self._config.auditor_periodic_check_interval_s
            await asyncio.sleep(self._config.tick_s)  # the auditor's clock tick
        if not self.stopped:
            log.warning("%s is no longer the auditor (session lost)", self._owner)

    async def tick(self) -> None:
        """Follow the registrations; scan when a bookie has been gone longer than the delay."""
        registry = self._client.registry
        registered = {b.bookie_id for b in registry.bookies()}
        self._known |= registered
        now = self._clock()
        self.tracker.observe(registered, self._known, now)
        due = self.tracker.due(now, self._config.lost_bookie_recovery_delay_s)
        if due:
            log.warning("bookies %s gone for over %.0fs: marking their ledgers under-replicated",
                        ", ".join(sorted(due)), self._config.lost_bookie_recovery_delay_s)
            await self.scan()

    async def scan(self) -> int:
        """Compare every ledger with the registered bookies; mark those holding data on lost bookies.

        Returns the number of ledgers marked.
        """
        client = self._client
        await client.registry.refresh()
        registered = {b.bookie_id for b in client.registry.bookies()}
        self._known |= registered
        now = self._clock()
        delay = self._config.lost_bookie_recovery_delay_s
        metadata = []
        for lid in await client.list_ledgers():
            try:
                md, _ = await client.get_metadata(lid)
            except NoSuchLedgerError:
                continue
            metadata.append(md)
        named = set().union(*(checker.bookies_of(md) for md in metadata)) if metadata else set()
        self.tracker.observe(registered, self._known | named, now)
        lost = self.tracker.lost(now, delay)
        marked = 0
        for md in metadata:
            on_lost = checker.bookies_of(md) & lost
            if on_lost:
                await self._marks.mark(md.ledger_id, Mark(missing=frozenset(on_lost)))
                marked += 1
        self.tracker.reported |= lost
        self.scans += 1
        if marked:
            log.info("auditor marked %d ledgers under-replicated (lost bookies: %s)", marked, ", ".join(sorted(lost)))
        return marked


async def current_auditor(store) -> str | None:
    try:
        data, _ = await store.get(AUDITOR)
    except (NoNodeError, MetadataError):
        return None
    return data.decode(errors="replace")

