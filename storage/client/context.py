"""ClientContext: the collaborators every ledger operation uses, in one object (STYLE.md 6).

Handles and operations receive the context instead of a dozen arguments, and
tests build one with fakes (a ``FaultPlan`` on the pool, a seeded rng, a
manual clock) instead of patching private attributes.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from storage.client.config import ClientConfig
from storage.client.connection import BookiePool
from storage.client.registry import BookieRegistry
from storage.metadata import MetadataStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BadReplica:
    """A replica that returned a corrupt entry (digest mismatch) or one with the wrong ids."""

    ledger_id: int
    entry_id: int
    bookie_id: str
    reason: str


@dataclass
class ClientStats:
    """Counters tests and metrics read; the client only ever increments them."""

    adds: int = 0
    ensemble_changes: int = 0
    recoveries: int = 0
    digest_mismatches: int = 0
    bad_replicas: list[BadReplica] = field(default_factory=list)
    placement_warnings: list[str] = field(default_factory=list)

    _MAX_KEPT = 1000  # bound the lists: a client lives for days

    def record_bad_replica(self, bad: BadReplica) -> None:
        self.digest_mismatches += 1
        if len(self.bad_replicas) < self._MAX_KEPT:
            self.bad_replicas.append(bad)

    def record_placement_warnings(self, warnings) -> None:
        for w in warnings:
            if len(self.placement_warnings) < self._MAX_KEPT:
                self.placement_warnings.append(w)


@dataclass
class ClientContext:
    config: ClientConfig
    store: MetadataStore
    registry: BookieRegistry
    pool: BookiePool
    rng: random.Random
    clock: Callable[[], float] = time.monotonic
    stats: ClientStats = field(default_factory=ClientStats)
    on_bad_replica: list[Callable[[BadReplica], None]] = field(default_factory=list)

    def report_bad_replica(self, ledger_id: int, entry_id: int, bookie_id: str, reason: str) -> None:
        bad = BadReplica(ledger_id, entry_id, bookie_id, reason)
        log.warning("bad replica: ledger %d entry %d on bookie %s: %s", ledger_id, entry_id, bookie_id, reason)
        self.stats.record_bad_replica(bad)
        for callback in self.on_bad_replica:
            callback(bad)
