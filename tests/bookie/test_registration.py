"""Registration: the ephemeral node's content, its removal on stop, re-registration after session loss.

Every test runs against each metadata backend, ZooKeeper included: ephemeral
nodes and session loss are exactly where a backend could differ.
"""

from __future__ import annotations

import json
import pytest

from storage.bookie.process import BookieService
from storage.metadata import open_store, paths
from storage.testing.waiting import wait_until_async
from tests.bookie.support import config_for


@pytest.fixture
def url(metadata_url) -> str:
    """Each test runs on memory://, file:// and a real ZooKeeper (tests/fixtures/zookeeper.py)."""
    return metadata_url


@pytest.fixture
async def store(url):
    s = await open_store(url)
    yield s
    await s.close()


async def test_node_describes_the_bookie_and_vanishes_on_stop(tmp_path, store):
    config = config_for(tmp_path, network_location="/zone-b/rack7")
    service = await BookieService.start(config, store=store)
    data, stat = await store.get(paths.available_path(config.bookie_id))
    assert json.loads(data) == {
        "bookie_id": config.bookie_id, "address": f"127.0.0.1:{config.port}",
        "http_address": f"127.0.0.1:{config.http_port}", "network_location": "/zone-b/rack7", "state": "writable",
    }
    assert stat.ephemeral_owner == store.session_id  # ephemeral: a dead bookie's session takes it away
    assert sorted(await store.children(paths.AVAILABLE)) == sorted(["readonly", config.bookie_id])
    await service.stop()
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    assert await store.exists(paths.readonly_path(config.bookie_id)) is None


async def test_advertised_address_is_what_clients_dial(tmp_path, store):
    config = config_for(tmp_path, host="127.0.0.1", advertised_address="bookie-0.example")
    service = await BookieService.start(config, store=store)
    assert config.bookie_id == f"bookie-0.example:{config.port}"
    node = json.loads((await store.get(paths.available_path(config.bookie_id)))[0])
    assert node["address"] == f"bookie-0.example:{config.port}"
    assert node["http_address"] == f"bookie-0.example:{config.http_port}"
    await service.stop()


async def test_reregisters_after_session_loss_keeping_its_mode(tmp_path, store):
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    old_session = store.session_id
    await store.expire_session()  # ephemerals gone, LOST then CONNECTED on a new session
    stat = await wait_until_async(lambda: store.exists(paths.available_path(config.bookie_id)), 10, "re-registration")
    assert stat.ephemeral_owner == store.session_id != old_session

    await service.force_read_only(True)
    await store.expire_session()
    data, _ = await wait_until_async(lambda: _get(store, paths.readonly_path(config.bookie_id)), 10, "read-only re-registration")
    assert json.loads(data)["state"] == "readonly"
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    await service.stop()


async def test_stop_right_after_session_loss_leaves_no_node(tmp_path, store):
    """The re-registration queued by CONNECTED must not resurrect a bookie that is stopping."""
    config = config_for(tmp_path)
    service = await BookieService.start(config, store=store)
    await store.expire_session()
    await service.stop()  # the queued re-registration finishes (or is skipped) before stop returns
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    assert await store.exists(paths.readonly_path(config.bookie_id)) is None


async def test_stale_node_of_a_dead_session_is_replaced(tmp_path, url, store):
    """After kill -9 and a quick restart the old session's node may linger; the restarted bookie takes it over."""
    config = config_for(tmp_path)
    ghost = await open_store(url)  # another session on the same tree: the "dead" bookie
    await ghost.create(paths.available_path(config.bookie_id), b'{"state": "ghost"}', ephemeral=True,
                       make_parents=True)
    service = await BookieService.start(config, store=store)
    data, stat = await store.get(paths.available_path(config.bookie_id))
    assert stat.ephemeral_owner == store.session_id and json.loads(data)["state"] == "writable"
    await service.stop()
    await ghost.close()


async def _get(store, path):
    return await store.get(path) if await store.exists(path) is not None else None
