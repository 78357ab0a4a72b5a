"""The client's metadata work (ids, ledger nodes, listing, registry watches) on every store backend.

No bookie is contacted: registrations are written directly, and ledgers are
created and closed without entries.
"""

import asyncio
import json

import pytest

from storage.client import ClientConfig, LedgerClient
from storage.errors import NoSuchLedgerError
from storage.ledger_metadata import LedgerState
from storage.metadata import open_store, paths


@pytest.fixture
async def store(metadata_url):
    s = await open_store(metadata_url)
    try:
        yield s
    finally:
        await s.close()


async def register(store, i, readonly=False):
    bookie_id = f"127.0.0.1:{5000 + i}"
    doc = {"bookie_id": bookie_id, "address": bookie_id, "network_location": f"/zone-{i % 3}/ud{i}",
           "state": "readonly" if readonly else "writable"}
    path = paths.readonly_path(bookie_id) if readonly else paths.available_path(bookie_id)
    await store.create(path, json.dumps(doc).encode(), ephemeral=True, make_parents=True)


async def test_ids_metadata_listing_and_registry(store, metadata_url):
    for i in range(3):
        await register(store, i)
    a = await LedgerClient.open(store, ClientConfig(placement_mode="strict"))
    b = await LedgerClient.open(metadata_url)  # owns (and closes) its own session
    try:
        assert len(a.registry.writable()) == 3
        handles = await asyncio.gather(*[(a if i % 2 else b).create_ledger(3, 2, 2) for i in range(6)])
        ids = sorted(h.ledger_id for h in handles)
        assert len(set(ids)) == 6
        assert await b.list_ledgers() == ids
        for h in handles:
            await h.close()
        md, _ = await a.get_metadata(ids[0])
        assert md.state is LedgerState.CLOSED and md.last_entry_id == -1
        await a.delete_ledger(ids[0])
        assert await b.list_ledgers() == ids[1:]
        with pytest.raises(NoSuchLedgerError):
            await b.get_metadata(ids[0])

        # Watches: b (another session) sees a new writable and a new read-only bookie.
        await register(store, 3)
        await register(store, 4, readonly=True)
        await b.registry.wait_for(lambda r: len(r.writable()) == 4 and len(r.bookies()) == 5, 10)
        assert not b.registry.get("127.0.0.1:5004").writable
    finally:
        await a.close()
        await b.close()
