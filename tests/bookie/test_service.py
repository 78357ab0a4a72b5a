"""A whole BookieService in-process: registration, HTTP health/metrics, the read-only switch, clean stop."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
import pytest

from storage.bookie.config import load_config
from storage.bookie.process import BookieService
from storage.metadata import open_store, paths
from tests.harness.processes import free_port


@pytest.fixture
async def store():
    s = await open_store(f"memory://{uuid.uuid4().hex}")
    yield s
    await s.close()


def config_for(tmp_path, **changes):
    return load_config(overrides={
        "metadata_store_url": "memory://unused", "data_dir": str(tmp_path / "bookie"), "port": free_port(),
        "http_port": free_port(), "network_location": "/zone-a/ud1", **changes,
    }, environ={})


async def until(condition, what: str, timeout_s: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (value := await condition()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
    return value


async def test_registration_describes_the_bookie_and_vanishes_on_stop(tmp_path, store):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    data, stat = await store.get(paths.available_path(config.bookie_id))
    assert json.loads(data) == {
        "bookie_id": config.bookie_id, "address": f"127.0.0.1:{config.port}",
        "http_address": f"127.0.0.1:{config.http_port}", "network_location": "/zone-a/ud1", "state": "writable",
    }
    assert stat.ephemeral_owner == store.session_id
    await service.stop()
    assert await store.exists(paths.available_path(config.bookie_id)) is None


async def test_reregisters_after_session_expiry(tmp_path, store):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    await store.expire_session()
    await until(lambda: store.exists(paths.available_path(config.bookie_id)), "re-registration")
    await service.stop()


async def test_health_metrics_and_admin_read_only_switch(tmp_path, store):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    base = f"http://127.0.0.1:{config.http_port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/health") as resp:
            assert resp.status == 200 and await resp.text() == "OK"
        async with http.get(f"{base}/metrics") as resp:
            text = await resp.text()
        for metric in ("bookie_add_entry_total", "bookie_journal_fsync_latency_seconds", "bookie_journal_group_size_records",
                       "bookie_disk_usage_bytes", "bookie_server_connections", "bookie_read_only"):
            assert metric in text, metric
        async with http.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": True}) as resp:
            assert resp.status == 200 and (await resp.json())["state"] == "readonly"
        assert await store.exists(paths.readonly_path(config.bookie_id)) is not None
        assert await store.exists(paths.available_path(config.bookie_id)) is None
        async with http.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": "yes"}) as resp:
            assert resp.status == 400 and "readOnly" in (await resp.json())["error"]
        async with http.put(f"{base}/api/v1/bookie/state/readonly", json={"readOnly": False}) as resp:
            assert (await resp.json())["state"] == "writable"
        assert await store.exists(paths.available_path(config.bookie_id)) is not None
        await service.stop()
        with pytest.raises(aiohttp.ClientConnectionError):
            async with http.get(f"{base}/health"):
                pass


async def test_disk_over_threshold_starts_read_only(tmp_path, store):
    config = config_for(tmp_path, disk_usage_threshold=0.0001, disk_usage_lwm_threshold=0.00005)
    service = await BookieService.start(config, store=store)
    assert service.read_only
    data, _ = await store.get(paths.readonly_path(config.bookie_id))
    assert json.loads(data)["state"] == "readonly"
    await service.stop()
