"""BookieRegistry follows /ledgers/available and /ledgers/available/readonly through watches."""

import json

import pytest

from storage.client import ClientConfig
from storage.errors import ClientClosedError, NotEnoughBookiesError
from storage.metadata import paths


def registration(bookie_id, zone="z1", state="writable", address=None):
    return json.dumps({
        "bookie_id": bookie_id, "address": address or bookie_id, "http_address": None,
        "network_location": f"/{zone}/ud1", "state": state,
    }).encode()


async def test_registry_tracks_writable_readonly_and_gone(cluster):
    client = await cluster.client()
    registry = client.registry
    store = cluster.store
    assert registry.bookies() == []
    await store.create(paths.available_path("10.0.0.1:3181"), registration("10.0.0.1:3181", "a"), ephemeral=True)
    await registry.wait_for(lambda r: r.get("10.0.0.1:3181") is not None, 5)
    info = registry.get("10.0.0.1:3181")
    assert (info.zone, info.writable, registry.address("10.0.0.1:3181")) == ("a", True, ("10.0.0.1", 3181))

    # Going read-only moves the registration under .../readonly.
    await store.delete(paths.available_path("10.0.0.1:3181"))
    await store.create(paths.readonly_path("10.0.0.1:3181"), registration("10.0.0.1:3181", "a", "readonly"), ephemeral=True)
    await registry.wait_for(lambda r: r.get("10.0.0.1:3181") is not None and not r.get("10.0.0.1:3181").writable, 5)
    assert registry.writable() == []
    assert [b.bookie_id for b in registry.bookies()] == ["10.0.0.1:3181"]
    assert "readonly" not in {b.bookie_id for b in registry.bookies()}

    await store.delete(paths.readonly_path("10.0.0.1:3181"))
    await registry.wait_for(lambda r: not r.bookies(), 5)
    # Unregistered bookies still hold data: their id is their address.
    assert registry.address("10.0.0.1:3181") == ("10.0.0.1", 3181)


async def test_registered_address_wins_over_the_id(cluster):
    client = await cluster.client()
    await cluster.store.create(paths.available_path("bookie-7"), registration("bookie-7", address="127.0.0.9:4181"),
                               ephemeral=True)
    await client.registry.wait_for(lambda r: r.get("bookie-7") is not None, 5)
    assert client.registry.address("bookie-7") == ("127.0.0.9", 4181)
    with pytest.raises(ValueError):
        client.registry.address("unknown-bookie")


async def test_readonly_bookies_are_not_placed(cluster):
    await cluster.start_bookies(2)
    client = await cluster.client()
    await cluster.store.create(paths.readonly_path("127.0.0.1:1"), registration("127.0.0.1:1", "zz", "readonly"),
                               ephemeral=True)
    await client.registry.wait_for(lambda r: len(r.bookies()) == 3, 5)
    with pytest.raises(NotEnoughBookiesError, match="need 3 writable bookies"):
        await client.create_ledger(3, 2, 2)


async def test_closing_the_client_stops_open_writers_without_touching_metadata(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client(ClientConfig())
    writer = await client.create_ledger(3, 2, 2)
    await writer.add_entry(b"x")
    _, version = await client.get_metadata(writer.ledger_id)
    await client.close()
    with pytest.raises(ClientClosedError):
        await writer.add_entry(b"y")
    with pytest.raises(ClientClosedError):
        await client.create_ledger(3, 2, 2)
    other = await cluster.client()
    md, after = await other.get_metadata(writer.ledger_id)
    assert after == version and not md.is_closed
