"""Zone-aware ensemble placement: pure functions of (candidates, sizes, policy, rng).

How this works
--------------
An ensemble is a ring of E bookies. Entry e is written to the Qw consecutive
positions starting at ``e mod E`` (``LedgerMetadata.write_set``), so the ring
has E *write sets* (one when Qw == E). Placement chooses the ring so that:

1. only writable bookies are used (read-only ones refuse adds);
2. every write set spans at least ``min(min_zones_per_write_set, Qw)`` zones,
   and ideally ``min(desired_zones_per_write_set, Qw)``;
3. no write set holds two bookies of the same (zone, upgrade domain).

Bookies with the same (zone, upgrade domain) are interchangeable for these
rules, so the search assigns *classes* to positions with a small depth-first
search (most zone-diverse class first, ties broken by the injected rng), then
draws concrete bookies from each class at random. The zone target starts at
the desired count and steps down to the minimum. When even the minimum cannot
be met, strict mode raises ``PlacementPolicyError`` naming the shortfall;
soft mode relaxes the rules one at a time and returns the ensemble with a
warning (``Placement.warnings``), which the caller logs, but never below
``required_zones_per_write_set`` (a ledger's own minimum, which raises too).

``replace_bookie`` does the same for one position of an existing ensemble
(ensemble change): the other positions stay, and the replacement must keep
every write set through that position within the rules.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from storage.client.config import PlacementPolicy
from storage.errors import NotEnoughBookiesError, PlacementPolicyError
from storage.ledger_metadata import validate_quorum
from storage.network_location import DEFAULT_NETWORK_LOCATION, parse_network_location

log = logging.getLogger(__name__)

_SEARCH_BUDGET = 20_000  # DFS nodes per attempt; E is small, so this only stops pathological inputs


@dataclass(frozen=True)
class BookieInfo:
    """What the client knows about one bookie (from its registration node)."""

    bookie_id: str
    address: str
    network_location: str = DEFAULT_NETWORK_LOCATION
    writable: bool = True
    http_address: str | None = None
    zone: str = field(init=False)
    upgrade_domain: str = field(init=False)

    def __post_init__(self) -> None:
        try:
            zone, ud = parse_network_location(self.network_location)
        except ValueError:
            # A bookie with a garbled location still serves data; place it as
            # if it had the default location rather than refusing to use it.
            zone, ud = parse_network_location(DEFAULT_NETWORK_LOCATION)
        object.__setattr__(self, "zone", zone)
        object.__setattr__(self, "upgrade_domain", ud)


@dataclass(frozen=True)
class Placement:
    ensemble: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def write_sets(ensemble_size: int, write_quorum_size: int) -> list[tuple[int, ...]]:
    """Ensemble positions of each distinct write set on the ring."""
    starts = range(ensemble_size) if write_quorum_size < ensemble_size else range(1)
    return [tuple((s + k) % ensemble_size for k in range(write_quorum_size)) for s in starts]


_Class = tuple[str, str]  # (zone, upgrade domain)


def _eligible(candidates: Iterable[BookieInfo], exclude: Iterable[str]) -> list[BookieInfo]:
    skip = set(exclude)
    seen: set[str] = set()
    out = []
    for b in candidates:
        if b.writable and b.bookie_id not in skip and b.bookie_id not in seen:
            seen.add(b.bookie_id)
            out.append(b)
    return out


def _zone_list(zones: Iterable[str]) -> str:
    return ", ".join(sorted(zones))


def new_ensemble(
    candidates: Sequence[BookieInfo],
    ensemble_size: int,
    write_quorum_size: int,
    ack_quorum_size: int,
    exclude: Iterable[str] = (),
    policy: PlacementPolicy = PlacementPolicy(),
    rng: random.Random | None = None,
) -> Placement:
    """Choose E writable bookies as a ring satisfying the zone rules.

    Raises InvalidQuorumError (unless E >= Qw >= Qa >= 1), NotEnoughBookiesError
    (fewer than E writable, non-excluded bookies) and, in strict mode,
    PlacementPolicyError (the zone rules cannot be met).
    """
    rng = rng or random.Random()
    validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)
    pool = _eligible(candidates, exclude)
    if len(pool) < ensemble_size:
        raise NotEnoughBookiesError(
            f"need {ensemble_size} writable bookies for the ensemble, only {len(pool)} available"
            + (f": {', '.join(sorted(b.bookie_id for b in pool))}" if pool else "")
        )
    by_class: dict[_Class, list[BookieInfo]] = {}
    for b in pool:
        by_class.setdefault((b.zone, b.upgrade_domain), []).append(b)
    counts = {c: len(v) for c, v in by_class.items()}
    zones = {c[0] for c in counts}
    windows = write_sets(ensemble_size, write_quorum_size)
    need = min(policy.min_zones_per_write_set, write_quorum_size)
    want = min(policy.desired_zones_per_write_set, write_quorum_size, len(zones))

    warnings: list[str] = []
    assignment = None
    for target in range(want, need - 1, -1):
        assignment = _search(counts, ensemble_size, windows, target, True, rng)
        if assignment is not None:
            break
    if assignment is None:
        problem = _explain(zones, counts, ensemble_size, write_quorum_size, need, pool)
        if policy.strict:
            raise PlacementPolicyError(problem)
        # Soft mode: relax the zone count first, then the upgrade-domain rule; never below a required count.
        floor = min(policy.required_zones_per_write_set, write_quorum_size)
        for target, unique in [(t, True) for t in range(need - 1, 0, -1)] + [(t, False) for t in range(need, 0, -1)]:
            if target < floor:
                continue
            assignment = _search(counts, ensemble_size, windows, target, unique, rng)
            if assignment is not None:
                warnings.append(
                    f"{problem}; placing anyway with {target} zone{'s' if target > 1 else ''} per write set"
                    + ("" if unique else " and repeated (zone, upgrade domain) pairs")
                )
                break
        if assignment is None:  # only a required zone count can do this: one zone with repeats always fits E
            raise PlacementPolicyError(problem)
        for w in warnings:
            log.warning("placement: %s", w)
    return Placement(_materialize(assignment, by_class, rng), tuple(warnings))


def _explain(zones, counts, ensemble_size, write_quorum_size, need, pool) -> str:
    if len(zones) < need:
        verb = "has" if len(zones) == 1 else "have"
        return (
            f"need {need} zones per write set, only {len(zones)} zone{'s' if len(zones) != 1 else ''} "
            f"({_zone_list(zones)}) {verb} writable bookies"
        )
    if len(counts) < write_quorum_size:
        return (
            f"a write set of {write_quorum_size} bookies may not repeat a (zone, upgrade domain) pair, "
            f"but writable bookies span only {len(counts)} such pairs"
        )
    per_zone: dict[str, int] = {}
    for b in pool:
        per_zone[b.zone] = per_zone.get(b.zone, 0) + 1
    spread = ", ".join(f"{z}={n}" for z, n in sorted(per_zone.items()))
    return (
        f"cannot arrange an ensemble of {ensemble_size} with write quorum {write_quorum_size} so that every "
        f"write set spans {need} zones with distinct upgrade domains; writable bookies per zone: {spread}"
    )


class _BudgetExhausted(Exception):
    pass


def _search(
    counts: dict[_Class, int], size: int, windows: list[tuple[int, ...]], target: int, unique: bool, rng: random.Random
) -> list[_Class] | None:
    """Assign a class to each ring position so every window meets the rules, or None."""
    assign: list[_Class | None] = [None] * size
    remaining = dict(counts)
    windows_of = [[w for w in windows if p in w] for p in range(size)]
    budget = [_SEARCH_BUDGET]

    def fits(p: int) -> bool:
        for w in windows_of[p]:
            filled = [assign[q] for q in w if assign[q] is not None]
            if unique and len(set(filled)) != len(filled):
                return False
            if len({c[0] for c in filled}) + len(w) - len(filled) < target:
                return False
        return True

    def options(p: int) -> list[_Class]:
        keyed = []
        for c, n in remaining.items():
            if n <= 0:
                continue
            # Prefer a class whose zone is new to the write sets through p: it
            # reaches the zone target without backtracking in the common case.
            fresh = sum(1 for w in windows_of[p] if all(assign[q] is None or assign[q][0] != c[0] for q in w))
            keyed.append((-fresh, rng.random(), c))
        keyed.sort()
        return [c for _, _, c in keyed]

    def dfs(p: int) -> bool:
        if p == size:
            return True
        for c in options(p):
            budget[0] -= 1
            if budget[0] < 0:
                raise _BudgetExhausted
            assign[p] = c
            remaining[c] -= 1
            if fits(p) and dfs(p + 1):
                return True
            assign[p] = None
            remaining[c] += 1
        return False

    try:
        return list(assign) if dfs(0) else None  # type: ignore[arg-type]
    except _BudgetExhausted:
        return None


def _materialize(assignment: list[_Class], by_class: dict[_Class, list[BookieInfo]], rng: random.Random) -> tuple[str, ...]:
    shuffled = {c: rng.sample(v, len(v)) for c, v in by_class.items()}
    return tuple(shuffled[c].pop().bookie_id for c in assignment)


def replace_bookie(
    ensemble: Sequence[str],
    index: int,
    candidates: Sequence[BookieInfo],
    write_quorum_size: int,
    exclude: Iterable[str] = (),
    policy: PlacementPolicy = PlacementPolicy(),
    rng: random.Random | None = None,
) -> Placement:
    """Choose a bookie for ``ensemble[index]`` (which failed); returns the new ensemble.

    The replacement is never a current member or in ``exclude``. Every write
    set through ``index`` must span ``min(min_zones, Qw)`` zones and not repeat
    the replacement's (zone, upgrade domain); strict mode raises
    PlacementPolicyError otherwise, soft mode takes the best candidate and
    warns. Raises NotEnoughBookiesError when no writable candidate is left.
    """
    rng = rng or random.Random()
    size = len(ensemble)
    if not 0 <= index < size:
        raise ValueError(f"position {index} outside an ensemble of {size}")
    pool = _eligible(candidates, set(exclude) | set(ensemble))
    if not pool:
        raise NotEnoughBookiesError(
            f"no writable bookie left to replace {ensemble[index]} (ensemble {', '.join(ensemble)})"
        )
    known = {b.bookie_id: b for b in candidates}
    windows = [w for w in write_sets(size, write_quorum_size) if index in w]
    need = min(policy.min_zones_per_write_set, write_quorum_size)
    want = min(policy.desired_zones_per_write_set, write_quorum_size)

    def score(b: BookieInfo) -> tuple[bool, int]:
        unique = True
        zones_min = write_quorum_size
        for w in windows:
            members = [known.get(ensemble[q]) for q in w if q != index]
            peers = [p for p in members if p is not None]
            if any((p.zone, p.upgrade_domain) == (b.zone, b.upgrade_domain) for p in peers):
                unique = False
            # A member missing from the candidates (dead, unregistered) has an
            # unknown location: assume it is a zone of its own rather than
            # refuse every replacement because of it.
            unknown = len(members) - len(peers)
            zones_min = min(zones_min, len({p.zone for p in peers} | {b.zone}) + unknown)
        return unique, min(zones_min, want)

    scored = [(score(b), rng.random(), b) for b in pool]
    scored.sort(key=lambda t: (not t[0][0], -t[0][1], t[1]))
    (unique, zones), _, best = scored[0]
    new = list(ensemble)
    new[index] = best.bookie_id
    warnings: tuple[str, ...] = ()
    if zones < need or not unique:
        pool_zones = {b.zone for b in pool}
        problem = (
            f"no replacement for {ensemble[index]} at position {index} keeps every write set across {need} zones "
            f"with distinct upgrade domains (writable candidates in zones: {_zone_list(pool_zones)})"
        )
        if policy.strict or zones < min(policy.required_zones_per_write_set, write_quorum_size):
            raise PlacementPolicyError(problem)
        warnings = (f"{problem}; using {best.bookie_id} in zone {best.zone} anyway",)
        log.warning("placement: %s", warnings[0])
    return Placement(tuple(new), warnings)
