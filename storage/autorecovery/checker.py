"""What a ledger's replicas should be, as pure functions of its metadata and the live bookies.

A *fragment* is the run of entries one ensemble wrote: from its first entry
to the entry before the next fragment, or to ``last_entry_id`` when the
ledger is closed. The writing fragment of an open ledger has no end yet and
is not repairable by copying: only its writer (or a recovery that fences
it) may change it.

Ensemble position ``p`` holds entry ``e`` when ``p`` is one of the Qw
positions striped from ``e mod E`` -- the same rule as
``LedgerMetadata.write_set``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from storage.ledger_metadata import LedgerMetadata, LedgerState


@dataclass(frozen=True)
class Fragment:
    index: int  # position in LedgerMetadata.ensembles
    first_entry_id: int
    last_entry_id: int | None  # inclusive; None: the writing fragment of an open ledger
    ensemble: tuple[str, ...]

    @property
    def writing(self) -> bool:
        return self.last_entry_id is None

    @property
    def empty(self) -> bool:
        return self.last_entry_id is not None and self.last_entry_id < self.first_entry_id


def fragments(md: LedgerMetadata) -> list[Fragment]:
    out = []
    for i, (first, ensemble) in enumerate(md.ensembles):
        if i + 1 < len(md.ensembles):
            last: int | None = md.ensembles[i + 1][0] - 1
            if md.is_closed:
                last = min(last, md.last_entry_id)
        else:
            last = md.last_entry_id if md.is_closed else None
        out.append(Fragment(i, first, last, tuple(ensemble)))
    return out


def entries_at(md: LedgerMetadata, fragment: Fragment, position: int) -> list[int]:
    """Entry ids of a (closed-ended) fragment that ensemble position ``position`` holds."""
    if fragment.last_entry_id is None:
        raise ValueError("the writing fragment of an open ledger has no end")
    e, qw = md.ensemble_size, md.write_quorum_size
    return [x for x in range(fragment.first_entry_id, fragment.last_entry_id + 1) if (position - x) % e < qw]


def bookies_of(md: LedgerMetadata) -> set[str]:
    return {b for _, ensemble in md.ensembles for b in ensemble}


def absent_bookies(md: LedgerMetadata, registered: Iterable[str]) -> set[str]:
    """Bookies the ledger names that are not registered (writable or read-only)."""
    return bookies_of(md) - set(registered)


@dataclass(frozen=True)
class RepairPlan:
    """Which positions of which fragments need a new bookie, and whether the writer must be fenced first."""

    replace: dict[int, tuple[int, ...]]  # fragment index -> ensemble positions to move
    writing_fragment_blocked: bool  # the open ledger's writing fragment names a gone bookie
    writing_fragment_waiting: bool  # ... names a live bookie to move off: its writer will do it


def plan_repair(md: LedgerMetadata, registered: Iterable[str], move_off: Iterable[str] = ()) -> RepairPlan:
    """Positions to re-replicate: held by a bookie that is gone, or one an operator asked to move off."""
    live = set(registered)
    moving = set(move_off)
    replace: dict[int, tuple[int, ...]] = {}
    blocked = waiting = False
    for frag in fragments(md):
        positions = tuple(p for p, b in enumerate(frag.ensemble) if b not in live or b in moving)
        if not positions:
            continue
        if frag.writing:
            if any(frag.ensemble[p] not in live for p in positions):
                blocked = True
            else:
                waiting = True
            continue
        replace[frag.index] = positions
    return RepairPlan(replace, blocked, waiting)


def ledger_is_open(md: LedgerMetadata) -> bool:
    return md.state in (LedgerState.OPEN, LedgerState.IN_RECOVERY)


def sample_entries(entries: list[int], full: bool) -> list[int]:
    """Every entry for a full check; otherwise the first and last (BookKeeper's fragment check)."""
    if full or len(entries) <= 2:
        return entries
    return [entries[0], entries[-1]]
