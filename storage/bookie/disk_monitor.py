"""Read-only mode: refuse writes when the disk is nearly full or the journal broke, accept them again once fixed.

Three inputs decide the mode, in this order of precedence (``decide_mode``,
a pure function, table-tested):

1. a failed journal -- the core can acknowledge nothing more, so the bookie
   goes read-only for good (until restarted) and keeps serving reads; clients
   stop choosing it once the registration moves under ``readonly/``; then
   quarantined journal damage (journal_damage.py), read-only until an
   operator clears it -- above the override, since a lost FENCE record must
   not let an old writer's adds back in;
2. an operator's override over HTTP (``PUT /api/v1/bookie/state/readonly``);
   ``force(None)`` hands control back to the measurement;
3. the fullest filesystem among the journal and ledger dirs, with hysteresis
   (go read-only above ``disk_usage_threshold``, come back only below
   ``disk_usage_lwm_threshold``) so a bookie near the line does not flap.
   With ``read_only_mode_enabled = false`` the disk is still measured (for the
   gauge) but never makes the bookie read-only.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from storage.bookie.config import BookieConfig

log = logging.getLogger(__name__)


def decide_read_only(usage_fraction: float, read_only: bool, threshold: float, lwm_threshold: float) -> bool:
    """The disk rule alone: hysteresis between the low-water mark and the threshold."""
    if usage_fraction > threshold:
        return True
    if usage_fraction < lwm_threshold:
        return False
    return read_only


@dataclass(frozen=True)
class Mode:
    read_only: bool
    reason: str  # why, for logs, the read-only refusal message and /api/v1/bookie/info


def decide_mode(
    usage_fraction: float,
    current: Mode,
    config: BookieConfig,
    *,
    forced: bool | None = None,
    journal_error: BaseException | None = None,
    journal_damage: str | None = None,
) -> Mode:
    """The bookie's mode from its inputs (see the module docstring for the precedence)."""
    if journal_error is not None:
        return Mode(True, f"journal failed: {journal_error}")
    if journal_damage is not None:
        return Mode(True, journal_damage)
    if forced is not None:
        return Mode(forced, f"set {'read-only' if forced else 'writable'} by an operator")
    usage = f"disk usage {usage_fraction:.4f}"
    if not config.read_only_mode_enabled:
        return Mode(False, f"{usage}; read-only mode disabled")
    read_only = decide_read_only(usage_fraction, current.read_only, config.disk_usage_threshold,
                                 config.disk_usage_lwm_threshold)
    if read_only:
        return Mode(True, f"{usage} above threshold {config.disk_usage_threshold}"
                    if usage_fraction > config.disk_usage_threshold
                    else f"{usage} not yet below low-water mark {config.disk_usage_lwm_threshold}")
    return Mode(False, usage)


def disk_usage_fraction(dirs: list[Path]) -> float:
    """The fullest filesystem among ``dirs`` (used / total), measured for real."""
    worst = 0.0
    for d in dirs:
        usage = shutil.disk_usage(d)
        worst = max(worst, usage.used / usage.total)
    return worst


WRITABLE = Mode(False, "starting")


class DiskMonitor:
    """Measures every ``disk_check_interval_ms`` and calls ``on_change(mode)`` when the mode flips.

    ``journal_error`` is a callable returning the core's journal failure (or
    None); ``measure`` defaults to the real ``shutil.disk_usage`` measurement.
    """

    def __init__(
        self,
        config: BookieConfig,
        on_change: Callable[[Mode], Awaitable[None]],
        *,
        journal_error: Callable[[], BaseException | None] = lambda: None,
        journal_damage: Callable[[], str | None] = lambda: None,
        measure: Callable[[list[Path]], float] = disk_usage_fraction,
    ):
        self._config = config
        self._on_change = on_change
        self._journal_error = journal_error
        self._journal_damage = journal_damage
        self._measure = measure
        self._forced: bool | None = None
        self._lock = asyncio.Lock()
        self.mode = WRITABLE
        self.last_usage = 0.0

    @property
    def read_only(self) -> bool:
        return self.mode.read_only

    def force(self, read_only: bool | None) -> None:
        self._forced = read_only

    async def check_once(self) -> bool:
        """Measure, decide, and apply a change. Returns whether the bookie is now read-only."""
        # Serialised: the periodic loop and an HTTP override may check at once,
        # and two on_change calls racing would leave the registration in either place.
        async with self._lock:
            c = self._config
            self.last_usage = self._measure([Path(c.journal_dir), Path(c.ledger_dir)])
            wanted = decide_mode(self.last_usage, self.mode, c, forced=self._forced,
                                 journal_error=self._journal_error(), journal_damage=self._journal_damage())
            if wanted.read_only != self.mode.read_only:
                log.warning("bookie %s going %s: %s", c.bookie_id, "read-only" if wanted.read_only else "writable",
                            wanted.reason)
                # Adopted only once applied: if re-registering fails, the next check tries again.
                await self._on_change(wanted)
            self.mode = wanted
            return self.mode.read_only

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.disk_check_interval_ms / 1000)  # the check period, not synchronisation
            try:
                await self.check_once()
            except Exception:  # a failed check must not stop the bookie
                log.exception("disk check failed")
