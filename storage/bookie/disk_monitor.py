"""Read-only mode: refuse writes when the disk is nearly full, accept them again once space returns.

``decide_read_only`` is the pure rule with hysteresis (go read-only above
``disk_usage_threshold``, come back only below ``disk_usage_lwm_threshold``)
so a bookie near the line does not flap. An operator can force either mode
over HTTP; ``force(None)`` hands control back to the measurement.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Awaitable, Callable

from storage.bookie.config import BookieConfig

log = logging.getLogger(__name__)


def decide_read_only(usage_fraction: float, read_only: bool, threshold: float, lwm_threshold: float) -> bool:
    if usage_fraction > threshold:
        return True
    if usage_fraction < lwm_threshold:
        return False
    return read_only


def disk_usage_fraction(dirs: list[Path]) -> float:
    """The fullest filesystem among ``dirs`` (used / total)."""
    worst = 0.0
    for d in dirs:
        usage = shutil.disk_usage(d)
        worst = max(worst, usage.used / usage.total)
    return worst


class DiskMonitor:
    def __init__(self, config: BookieConfig, on_change: Callable[[bool], Awaitable[None]], *,
                 measure: Callable[[list[Path]], float] = disk_usage_fraction):
        self._config = config
        self._on_change = on_change
        self._measure = measure
        self._forced: bool | None = None
        self.read_only = False
        self.last_usage = 0.0

    def force(self, read_only: bool | None) -> None:
        self._forced = read_only

    async def check_once(self) -> bool:
        c = self._config
        self.last_usage = self._measure([Path(c.journal_dir), Path(c.ledger_dir)])
        if self._forced is not None:
            wanted = self._forced
        else:
            wanted = decide_read_only(self.last_usage, self.read_only, c.disk_usage_threshold, c.disk_usage_lwm_threshold)
        if wanted != self.read_only:
            log.warning("bookie %s going %s (disk usage %.4f, threshold %.4f, low-water mark %.4f%s)", c.bookie_id,
                        "read-only" if wanted else "writable", self.last_usage, c.disk_usage_threshold,
                        c.disk_usage_lwm_threshold, ", forced by operator" if self._forced is not None else "")
            self.read_only = wanted
            await self._on_change(wanted)
        return self.read_only

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.disk_check_interval_ms / 1000)  # the check period, not synchronisation
            try:
                await self.check_once()
            except Exception:  # a failed check must not stop the bookie
                log.exception("disk check failed")
