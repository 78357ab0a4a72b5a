"""What every nemesis fault is: something the schedule can inject into a running cluster and later heal.

The schedule draws faults from a seeded random generator. It never holds more bookie faults at once than the ledger
quorums tolerate, so each fault says how many bookies it takes out of service while it is active.
"""

from __future__ import annotations

import abc
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Injected:
    """What one injection did, for the history and the report."""

    kind: str  # the fault's kind, e.g. "kill-bookie"
    target: str  # the process it hit, e.g. "bookie-2" or "zookeeper"
    detail: str = ""


class Fault(abc.ABC):
    """One kind of fault. Subclasses are small: they act on the cluster object the nemesis hands them."""

    kind: str = ""
    bookie_faults: int = 0  # bookies out of service while this fault is active
    broker_faults: int = 0  # brokers out of service while this fault is active

    def applicable(self, cluster) -> bool:
        """Whether this fault can run against this cluster (e.g. no broker partition in standalone)."""
        return True

    @abc.abstractmethod
    def inject(self, cluster, rng: random.Random) -> Injected:
        """Start the fault. Returns what it hit."""

    @abc.abstractmethod
    def heal(self, cluster) -> None:
        """End the fault and wait until the hit process is back in service (with a deadline)."""
