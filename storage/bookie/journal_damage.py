"""What a bookie does when journal replay finds damage that is not a torn tail.

How this works
--------------
Replay (journal.py) applies only what is proven -- the records before the
bad one and every later file -- and classifies each stop. A torn tail is the
normal crash case: the bookie truncates it (ignores it) and starts. Any other
stop means records written before the crash went bad after they were synced:
entries this bookie acknowledged, fences and master keys may be gone. Then
``journal_verdict`` (pure, table-tested) picks one of:

* REFUSE -- do not start, name the file and offset, leave the journal as it is.
  Chosen when ``journal_corruption_policy = "refuse"``, or when some ledger
  this bookie holds (or that a readable record after the damage names) has
  ack quorum 1 and this bookie in an ensemble: an entry acknowledged by this
  bookie alone has no other copy to re-replicate from, so only an operator
  (who may salvage the file) can decide to accept the loss.
* READ_ONLY -- the default otherwise. Every acknowledged entry also sits on
  at least one other bookie (ack quorum >= 2), so autorecovery can replace
  what was lost. The damaged files are copied into ``<journal_dir>/damaged/``
  (kept for salvage; the originals go at the first checkpoint as usual); while
  that directory holds files the bookie stays read-only -- a lost FENCE
  record must not let the old writer's adds back in -- and answers a fencing
  read of an entry it lacks with an error instead of "no such entry": it can
  no longer vouch for that, and recovery would otherwise close a ledger short
  of an acknowledged entry. The operator empties ``damaged/`` once the
  bookie's ledgers are re-replicated; the next start is writable.

An operator who wants to start a refused bookie anyway (accepting the loss)
moves the named file into ``damaged/`` by hand: the bookie then starts
read-only as above.
"""

from __future__ import annotations

import enum
import filecmp
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from storage.bookie.journal import JournalDamage, fsync_dir
from storage.errors import BookieStartupError

if TYPE_CHECKING:
    from storage.bookie.config import BookieConfig

log = logging.getLogger(__name__)

DAMAGED_DIR = "damaged"
POLICIES = ("auto", "refuse")


class Action(enum.Enum):
    START = "start"
    READ_ONLY = "read_only"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Verdict:
    action: Action
    message: str


def journal_verdict(damage: Iterable[JournalDamage], policy: str, unreplicated_ledgers: Iterable[int]) -> Verdict:
    """The start-up decision from the classified replay stops (see the module docstring).

    ``unreplicated_ledgers``: ledgers with ack quorum 1 whose ensembles include this bookie.
    """
    if policy not in POLICIES:
        raise ValueError(f"journal_corruption_policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    lost = [d for d in damage if not d.torn_tail]
    if not lost:
        return Verdict(Action.START, "")
    where = "; ".join(d.describe() for d in lost)
    risk = "records this bookie acknowledged (entries, fences) may be lost"
    unreplicated = sorted(set(unreplicated_ledgers))
    if policy == "refuse":
        return Verdict(Action.REFUSE, f"{where}: {risk}; journal_corruption_policy is 'refuse'. {_manual(lost)}")
    if unreplicated:
        shown = ", ".join(map(str, unreplicated[:10])) + (" ..." if len(unreplicated) > 10 else "")
        return Verdict(
            Action.REFUSE,
            f"{where}: {risk}, and ledger(s) {shown} have ack quorum 1 with this bookie in an ensemble, so an "
            f"entry acknowledged here may have no other copy to re-replicate from. {_manual(lost)}",
        )
    return Verdict(
        Action.READ_ONLY,
        f"{where}: {risk}; every ledger checked has another copy, so the bookie starts read-only for "
        "autorecovery to re-replicate",
    )


def _manual(lost: list[JournalDamage]) -> str:
    damaged = lost[0].path.parent / DAMAGED_DIR
    return (f"The journal was left as it is. Salvage what you can from the file; to start read-only anyway, "
            f"accepting the loss, move it into {damaged}/.")


def damaged_dir(journal_dir: Path) -> Path:
    return Path(journal_dir) / DAMAGED_DIR


def quarantined_files(journal_dir: Path) -> list[str]:
    """Names of files under ``damaged/``: while any remain, the bookie stays read-only."""
    try:
        return sorted(os.listdir(damaged_dir(journal_dir)))
    except FileNotFoundError:
        return []


def quarantine(journal_dir: Path, damage: Iterable[JournalDamage]) -> list[Path]:
    """Copy the damaged journal files into ``damaged/`` (blocking; durable before returning).

    A copy, not a move: the original still holds the proven prefix until the
    start-up checkpoint has flushed it, and deletes the original as usual. A
    crash in between replays the original again and reaches the same verdict.
    """
    target = damaged_dir(journal_dir)
    target.mkdir(exist_ok=True)
    kept = []
    for d in damage:
        dest = target / d.path.name
        n = 1
        while dest.exists() and not filecmp.cmp(dest, d.path, shallow=False):
            dest = target / f"{d.path.name}.{n}"  # an earlier quarantine kept another file of this name
            n += 1
        if not dest.exists():
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.copyfile(d.path, tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, dest)
        kept.append(dest)
    fsync_dir(target)
    fsync_dir(Path(journal_dir))
    return kept


# (lost damage, ids of ledgers this bookie holds or the damage names) -> verdict
DamageJudge = Callable[[list[JournalDamage], set[int]], Awaitable[Verdict]]


def policy_only(config: "BookieConfig") -> DamageJudge:
    """The judge without a metadata store: the configured policy, no ledger known to be unreplicated."""

    async def judge(damage: list[JournalDamage], _ledger_ids: set[int]) -> Verdict:
        return journal_verdict(damage, config.journal_corruption_policy, ())

    return judge


async def settle_damage(journal_dir: Path, damage: list[JournalDamage], ledger_ids: set[int],
                        judge: DamageJudge, run_blocking) -> str | None:
    """Apply the verdict at bookie start; returns why the bookie must stay read-only (None: it need not).

    Raises BookieStartupError (the journal left as it is) when the verdict is REFUSE.
    """
    lost = [d for d in damage if not d.torn_tail]
    if lost:
        verdict = await judge(lost, ledger_ids.union(*(d.named_ledgers for d in lost)))
        if verdict.action is Action.REFUSE:
            raise BookieStartupError(verdict.message)
        if verdict.action is Action.READ_ONLY:
            kept = await run_blocking(quarantine, journal_dir, lost)
            log.error("%s; kept a copy in %s", verdict.message, ", ".join(map(str, kept)))
    held = quarantined_files(journal_dir)
    if not held:
        return None
    return (f"journal files {', '.join(held)} in {damaged_dir(journal_dir)} lost records; read-only until this "
            "bookie's ledgers are re-replicated and an operator empties that directory")
