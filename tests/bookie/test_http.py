"""The bookie's HTTP endpoint: /health, /metrics, /api/v1/bookie/info and the read-only switch."""

from __future__ import annotations

import re
import uuid

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from storage import protocol as p
from storage.bookie.http import start_http
from storage.bookie.process import BookieService
from storage.metadata import open_store, paths
from storage.testing.processes import free_port
from storage.testing.waiting import wait_until_async
from tests.bookie.support import Conn, add, config_for, make_ledger


@pytest.fixture
async def store():
    s = await open_store(f"memory://{uuid.uuid4().hex}")
    yield s
    await s.close()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def sample(text: str, name: str) -> float:
    """The value of one unlabelled sample in Prometheus text."""
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in metrics"
    return float(match.group(1))


async def get_text(http, url) -> tuple[int, str]:
    async with http.get(url) as resp:
        return resp.status, await resp.text()


async def test_health_info_and_metrics(tmp_path, store, http):
    config = config_for(tmp_path, network_location="/zone-c/ud3")
    service = await BookieService.start(config, store=store)
    base = f"http://127.0.0.1:{config.http_port}"
    assert await get_text(http, f"{base}/health") == (200, "OK")

    async with http.get(f"{base}/api/v1/bookie/info") as resp:
        info = await resp.json()
    assert info["bookie_id"] == config.bookie_id and info["state"] == "writable"
    assert (info["zone"], info["upgrade_domain"], info["network_location"]) == ("zone-c", "ud3", "/zone-c/ud3")
    assert info["serving"] is True and 0 < info["disk_usage_fraction"] < 1

    await make_ledger(store, 1)
    conn = await Conn.open(service.port)
    conn.send(*(add(i, 1, i) for i in range(3)))
    assert all(r.status == p.OK for r in await conn.recv(3))
    assert (await conn.request(p.ReadRequest(10, 1, 0))).status == p.OK
    _, text = await get_text(http, f"{base}/metrics")
    assert sample(text, "bookie_add_entry_total") == 3
    assert sample(text, "bookie_read_entry_total") == 1
    assert sample(text, "bookie_server_connections") == 1
    assert sample(text, "bookie_server_connections_accepted_total") == 1
    assert sample(text, "bookie_read_only") == 0
    assert sample(text, "bookie_disk_usage_bytes") > 0
    assert 0 < sample(text, "bookie_disk_usage_ratio") < 1
    assert sample(text, "bookie_journal_fsync_latency_seconds_count") >= 1
    assert "bookie_journal_group_size_records_bucket" in text
    assert 'bookie_server_requests_total{op="add",status="0"} 3.0' in text
    await conn.close()

    async def connections() -> float:
        return sample((await get_text(http, f"{base}/metrics"))[1], "bookie_server_connections")

    await wait_until_async(lambda: _equals(connections(), 0), 10, "the closed connection to leave the gauge")
    await service.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get_text(http, f"{base}/health")


async def test_admin_read_only_switch(tmp_path, store, http):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    url = f"http://127.0.0.1:{config.http_port}/api/v1/bookie/state/readonly"
    async with http.put(url, json={"readOnly": True}) as resp:
        body = await resp.json()
        assert resp.status == 200 and body["state"] == "readonly" and "operator" in body["state_reason"]
    assert await store.exists(paths.readonly_path(config.bookie_id)) is not None
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    _, text = await get_text(http, f"http://127.0.0.1:{config.http_port}/metrics")
    assert sample(text, "bookie_read_only") == 1
    for bad in ({"readOnly": "yes"}, {"ro": True}, [True]):
        async with http.put(url, json=bad) as resp:
            assert resp.status == 400 and "readOnly" in (await resp.json())["error"]
    async with http.put(url, data=b"not json") as resp:
        assert resp.status == 400
    async with http.put(url, json={"readOnly": None}) as resp:  # back to the disk monitor: disk is not full
        assert (await resp.json())["state"] == "writable"
    assert await store.exists(paths.available_path(config.bookie_id)) is not None
    await service.stop()


async def test_each_bookie_has_its_own_registry(tmp_path, store, http):
    """Standalone runs three bookies in one process: their metrics must not mix."""
    one = await BookieService.start(config_for(tmp_path, "one"), store=store)
    two = await BookieService.start(config_for(tmp_path, "two", network_location="/zone-b/ud1"), store=store)
    await make_ledger(store, 5)
    conn = await Conn.open(one.port)
    assert (await conn.request(add(1, 5, 0))).status == p.OK
    await conn.close()
    _, text_one = await get_text(http, f"http://127.0.0.1:{one.http_port}/metrics")
    _, text_two = await get_text(http, f"http://127.0.0.1:{two.http_port}/metrics")
    assert sample(text_one, "bookie_add_entry_total") == 1
    assert sample(text_two, "bookie_add_entry_total") == 0
    await one.stop()
    await two.stop()


class StandIn:
    """The HTTP app's one collaborator (STYLE 6): a service that is up but not healthy."""

    def __init__(self, why: str):
        self.why = why
        self.registry = CollectorRegistry()

    def health(self):
        return False, self.why


@pytest.mark.parametrize("why", ["not serving (starting or stopping)", "journal failed: [Errno 5] EIO"])
async def test_health_is_503_with_the_reason_when_not_healthy(http, why):
    port = free_port()
    runner = await start_http(StandIn(why), "127.0.0.1", port)
    try:
        assert await get_text(http, f"http://127.0.0.1:{port}/health") == (503, why)
    finally:
        await runner.cleanup()


async def test_health_is_503_while_stopping(tmp_path, store, http):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    service.serving = False  # the first thing stop() does; the HTTP server is still up at that point
    health = await get_text(http, f"http://127.0.0.1:{config.http_port}/health")
    assert health == (503, "not serving (starting or stopping)")
    await service.stop()


async def _equals(awaitable, value) -> bool:
    return await awaitable == value
