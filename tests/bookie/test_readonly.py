"""Read-only mode: the decision tables, the monitor on a real disk measurement, and a whole bookie going read-only.

The disk is never mocked: a tiny ``disk_usage_threshold`` (0.0001) makes any
real filesystem "full", which is how the service-level tests force the mode.
"""

from __future__ import annotations

import json
import uuid

import pytest

from storage import digest, protocol as p
from storage.bookie.config import load_config
from storage.bookie.disk_monitor import WRITABLE, DiskMonitor, Mode, decide_mode, decide_read_only, disk_usage_fraction
from storage.bookie.process import BookieService
from storage.errors import BookieReadOnlyError
from storage.metadata import open_store, paths
from storage.testing.waiting import wait_until_async
from tests.bookie.support import Conn, add, config_for, make_ledger

TINY = {"disk_usage_threshold": 0.0001, "disk_usage_lwm_threshold": 0.00005}


@pytest.mark.parametrize(
    "usage, read_only, expected",
    [(0.50, False, False), (0.96, False, True), (0.93, True, True), (0.93, False, False), (0.89, True, False),
     (0.95, False, False), (0.90, True, True)],
)
def test_disk_hysteresis(usage, read_only, expected):
    assert decide_read_only(usage, read_only, threshold=0.95, lwm_threshold=0.90) is expected


def cfg(**changes):
    return load_config(overrides={"metadata_store_url": "memory://x", "data_dir": "/d", **changes}, environ={})


READ_ONLY = Mode(True, "earlier")


@pytest.mark.parametrize(
    "usage, current, config, forced, journal_error, expected_ro, reason",
    [
        (0.50, WRITABLE, cfg(), None, None, False, "disk usage 0.5000"),
        (0.97, WRITABLE, cfg(), None, None, True, "above threshold 0.95"),
        (0.92, READ_ONLY, cfg(), None, None, True, "not yet below low-water mark 0.9"),
        (0.50, READ_ONLY, cfg(), None, None, False, "disk usage"),
        (0.99, WRITABLE, cfg(read_only_mode_enabled=False), None, None, False, "read-only mode disabled"),
        (0.99, READ_ONLY, cfg(), False, None, False, "set writable by an operator"),
        (0.10, WRITABLE, cfg(), True, None, True, "set read-only by an operator"),
        (0.10, WRITABLE, cfg(), False, OSError(5, "EIO"), True, "journal failed"),  # beats the operator
        (0.10, WRITABLE, cfg(read_only_mode_enabled=False), None, OSError(28, "ENOSPC"), True, "journal failed"),
    ],
)
def test_mode_table(usage, current, config, forced, journal_error, expected_ro, reason):
    mode = decide_mode(usage, current, config, forced=forced, journal_error=journal_error)
    assert mode.read_only is expected_ro and reason in mode.reason, mode


async def test_monitor_on_real_usage_operator_override_and_journal_failure(tmp_path):
    config = load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path), **TINY},
                         environ={})
    config.journal_dir.mkdir(parents=True)
    config.ledger_dir.mkdir(parents=True)
    assert 0 < disk_usage_fraction([config.journal_dir]) < 1
    changes: list[bool] = []
    journal = {"error": None}

    async def on_change(mode: Mode):
        changes.append(mode.read_only)

    monitor = DiskMonitor(config, on_change, journal_error=lambda: journal["error"])
    assert await monitor.check_once() is True and changes == [True]  # any real disk is above 0.01 %
    assert monitor.last_usage > 0.0001
    assert await monitor.check_once() is True and changes == [True]  # no change, no callback
    monitor.force(False)
    assert await monitor.check_once() is False and changes == [True, False]
    journal["error"] = OSError(5, "Input/output error")
    assert await monitor.check_once() is True and "journal failed" in monitor.mode.reason
    monitor.force(None)
    assert await monitor.check_once() is True and changes == [True, False, True]


async def test_a_failed_mode_change_is_retried_on_the_next_check(tmp_path):
    config = load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path), **TINY},
                         environ={})
    config.journal_dir.mkdir(parents=True)
    config.ledger_dir.mkdir(parents=True)
    attempts: list[bool] = []

    async def on_change(mode: Mode):
        attempts.append(mode.read_only)
        if len(attempts) == 1:
            raise OSError("metadata store unreachable")

    monitor = DiskMonitor(config, on_change)
    with pytest.raises(OSError):
        await monitor.check_once()
    assert monitor.read_only is False  # not adopted: the registration did not move
    assert await monitor.check_once() is True and attempts == [True, True]


@pytest.fixture
async def store():
    s = await open_store(f"memory://{uuid.uuid4().hex}")
    yield s
    await s.close()


async def test_full_disk_bookie_registers_read_only_refuses_adds_and_serves_reads(tmp_path, store):
    await make_ledger(store, 1)
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)  # normal thresholds: writable
    conn = await Conn.open(service.port)
    assert (await conn.request(add(1, 1, 0, b"written while writable"))).status == p.OK
    await conn.close()
    await service.stop()

    full = config_for(tmp_path, port=config.port, http_port=config.http_port, **TINY)
    service = await BookieService.start(full, store=store)
    assert service.read_only
    data, stat = await store.get(paths.readonly_path(full.bookie_id))
    assert json.loads(data)["state"] == "readonly" and stat.ephemeral_owner == store.session_id
    assert await store.exists(paths.available_path(full.bookie_id)) is None
    assert "above threshold 0.0001" in service.info()["state_reason"]

    conn = await Conn.open(service.port)
    assert (await conn.request(add(2, 1, 1))).status == BookieReadOnlyError.code
    read = await conn.request(p.ReadRequest(3, 1, 0))
    assert read.status == p.OK and digest.verify(read.body, 1, 0).payload == b"written while writable"
    assert (await conn.request(add(4, 1, 1, flags=p.FLAG_RECOVERY))).status == p.OK  # recovery adds still pass
    await conn.close()
    await service.stop()
    assert await store.exists(paths.readonly_path(full.bookie_id)) is None


async def test_running_monitor_moves_the_registration(tmp_path, store):
    """The periodic check (not a direct call) takes a bookie read-only once an operator hands control back."""
    config = config_for(tmp_path, disk_check_interval_ms=20, **TINY)
    service = await BookieService.start(config, store=store)
    assert service.read_only
    await service.force_read_only(False)
    assert not service.read_only
    assert await store.exists(paths.available_path(config.bookie_id)) is not None
    assert await store.exists(paths.readonly_path(config.bookie_id)) is None
    service.disk_monitor.force(None)  # no check here: the running loop must notice on its own
    await wait_until_async(lambda: store.exists(paths.readonly_path(config.bookie_id)), 10, "the monitor loop to go read-only")
    assert service.read_only
    await wait_until_async(lambda: _absent(store, paths.available_path(config.bookie_id)), 10, "the writable node to go")
    await service.stop()


async def _absent(store, path) -> bool:
    return await store.exists(path) is None
