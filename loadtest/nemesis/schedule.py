"""The seeded fault schedule: which faults, for how long, and how many bookies may be out at once.

``FAULT_KINDS`` is the registry every fault module adds to: kind name -> Fault subclass (instantiated once
per injection, so an instance may remember what it hit for ``heal``). Process faults live in process_faults.py;
network and disk faults in net_faults.py and disk_faults.py, each registered with one line below.

A round: ``plan_round`` draws one or two faults from the seeded generator, never more bookie faults at once than
the quorums tolerate (write quorum - ack quorum), never every broker, and a fault marked ``exclusive`` (the
ZooKeeper outage) alone; they are injected, held for a drawn time, healed (each heal waits until its target
serves again), then the cluster runs quiet for a drawn time. Same seed, same plan.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from loadtest.nemesis.disk_faults import DISK_FAULTS
from loadtest.nemesis.fault import Fault
from loadtest.nemesis.net_faults import NET_FAULTS
from loadtest.nemesis.process_faults import PROCESS_FAULTS

HOLD_S = (1.0, 4.0)
QUIET_S = (1.0, 3.0)


def _registry(*groups: list[type[Fault]]) -> dict[str, type[Fault]]:
    kinds: dict[str, type[Fault]] = {}
    for group in groups:
        for cls in group:
            if not cls.kind or cls.kind in kinds:
                raise ValueError(f"fault kind {cls.kind!r} of {cls.__name__} is empty or registered twice")
            kinds[cls.kind] = cls
    return kinds


# Kind name -> Fault subclass. Add a module's list here (e.g. net_faults.NET_FAULTS, disk_faults.DISK_FAULTS).
FAULT_KINDS: dict[str, type[Fault]] = _registry(
    PROCESS_FAULTS,
    NET_FAULTS,
    DISK_FAULTS,
)


@dataclass(frozen=True)
class Round:
    kinds: tuple[str, ...]
    hold_s: float
    quiet_s: float


def plan_round(rng: random.Random, kinds: dict[str, type[Fault]], bookie_budget: int, broker_budget: int) -> Round:
    """One round's faults from ``kinds`` (already filtered to the applicable ones). Pure: same generator state,
    same round. ``bookie_budget``: bookies that may be out at once; ``broker_budget``: brokers."""
    names = sorted(kinds)
    fits = [n for n in names if kinds[n].bookie_faults <= bookie_budget and kinds[n].broker_faults <= broker_budget]
    if not fits:
        raise ValueError(f"no fault kind fits a budget of {bookie_budget} bookies and {broker_budget} brokers")
    chosen = [rng.choice(fits)]
    if rng.random() < 0.4 and not getattr(kinds[chosen[0]], "exclusive", False):
        bookies = bookie_budget - kinds[chosen[0]].bookie_faults
        brokers = broker_budget - kinds[chosen[0]].broker_faults
        more = [n for n in fits if n != chosen[0] and not getattr(kinds[n], "exclusive", False)
                and kinds[n].bookie_faults <= bookies and kinds[n].broker_faults <= brokers]
        if more:
            chosen.append(rng.choice(more))
    return Round(tuple(chosen), round(rng.uniform(*HOLD_S), 2), round(rng.uniform(*QUIET_S), 2))


def plan(seed: int, rounds: int, kinds: dict[str, type[Fault]], bookie_budget: int, broker_budget: int) -> list[Round]:
    rng = random.Random(seed)
    return [plan_round(rng, kinds, bookie_budget, broker_budget) for _ in range(rounds)]


class FaultError(Exception):
    """A fault could not be injected or healed (the cluster did not come back in time)."""


class Nemesis:
    """Runs a plan against a cluster, recording each injection and heal in the history."""

    def __init__(self, cluster, history, seed: int, log=print):
        self.cluster, self.history, self.log = cluster, history, log
        self.rng = random.Random(seed ^ 0x5EED)  # targets: a stream of its own, so the plan does not shift
        self.stop = threading.Event()
        self.injected: dict[str, int] = {}
        self._ids = 0

    def run(self, rounds: list[Round], kinds: dict[str, type[Fault]]) -> None:
        for number, r in enumerate(rounds, 1):
            active = []
            try:
                for name in r.kinds:
                    fault = kinds[name]()
                    self._ids += 1
                    fault_id = str(self._ids)
                    self.history.record("fault", "invoke", "nemesis", kind=name, fault_id=fault_id, round=number)
                    try:
                        what = fault.inject(self.cluster, self.rng)
                    except Exception as exc:
                        self.history.record("fault", "fail", "nemesis", kind=name, fault_id=fault_id,
                                            error=repr(exc)[:500])
                        raise FaultError(f"round {number}: injecting {name} failed: {exc}") from exc
                    active.append((fault, fault_id, name))
                    self.injected[name] = self.injected.get(name, 0) + 1
                    self.log(f"round {number}: {what.kind} -> {what.target} {what.detail}".rstrip())
                self.stop.wait(r.hold_s)
            finally:
                self._heal_all(number, active)
            self.stop.wait(r.quiet_s)

    def _heal_all(self, number: int, active: list) -> None:
        """Heal every active fault (the last injected first), even when one heal fails; then raise the first."""
        failed = None
        for fault, fault_id, name in reversed(active):
            try:
                fault.heal(self.cluster)
            except Exception as exc:
                self.history.record("fault", "fail", "nemesis", kind=name, fault_id=fault_id, error=repr(exc)[:500])
                failed = failed or FaultError(f"round {number}: healing {name} failed: {exc}")
                continue
            self.history.record("fault", "ok", "nemesis", kind=name, fault_id=fault_id, round=number)
        if failed:
            raise failed
