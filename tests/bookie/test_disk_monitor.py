"""Read-only mode decisions (hysteresis) and the monitor against a real disk measurement."""

from __future__ import annotations

import pytest

from storage.bookie.config import load_config
from storage.bookie.disk_monitor import DiskMonitor, decide_read_only, disk_usage_fraction


@pytest.mark.parametrize(
    "usage, read_only, expected",
    [(0.50, False, False), (0.96, False, True), (0.93, True, True), (0.93, False, False), (0.89, True, False),
     (0.95, False, False), (0.90, True, True)],
)
def test_hysteresis(usage, read_only, expected):
    assert decide_read_only(usage, read_only, threshold=0.95, lwm_threshold=0.90) is expected


async def test_monitor_flips_on_real_usage_and_back(tmp_path):
    cfg = load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path),
                                 "disk_usage_threshold": 0.0001, "disk_usage_lwm_threshold": 0.00005}, environ={})
    cfg.journal_dir.mkdir(parents=True)
    cfg.ledger_dir.mkdir(parents=True)
    assert 0 < disk_usage_fraction([cfg.journal_dir]) < 1
    changes = []

    async def on_change(read_only):
        changes.append(read_only)

    usage = {"value": None}
    monitor = DiskMonitor(cfg, on_change, measure=lambda dirs: usage["value"] if usage["value"] is not None
                          else disk_usage_fraction(dirs))
    assert await monitor.check_once() is True and changes == [True]  # real usage is above 0.01 %
    usage["value"] = 0.00001
    assert await monitor.check_once() is False and changes == [True, False]
    monitor.force(True)
    assert await monitor.check_once() is True
    monitor.force(None)
    assert await monitor.check_once() is False and changes == [True, False, True, False]
