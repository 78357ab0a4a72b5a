"""Managed-ledger tests run on the in-process cluster of the ledger-client tests (real bookies, memory:// store),
and, through the ``ledgers`` fixture, also on in-memory ledgers (storage.client.memory) where no bookie is needed.

``ledgers`` is parametrized over both backends: the same test, with the same
assertions, runs on bookies and on memory. Both give ``store`` (a memory://
metadata store), ``client()`` (a new ledger client on the shared ledgers) and
``start_bookies(n)`` (a no-op on memory).
"""

from __future__ import annotations

import uuid

import pytest

from storage.client import api
from storage.client.memory import MemoryLedgerClient, MemoryLedgerStore
from storage.metadata import open_store
from tests.client.conftest import Cluster, cluster, wait_until  # noqa: F401  (fixture and helper re-used, not copied)


class MemoryLedgers:
    """The ``memory`` backend: a metadata store and one MemoryLedgerStore that every client shares."""

    kind = "memory"

    def __init__(self, url: str):
        self.url = url
        self.store = None
        self.ledger_store = MemoryLedgerStore()
        self._clients: list[MemoryLedgerClient] = []

    async def open(self) -> None:
        self.store = await open_store(self.url)

    async def start_bookies(self, n: int) -> list[str]:
        return []

    async def client(self, config=None) -> api.LedgerClient:
        client = MemoryLedgerClient(self.ledger_store, config)
        self._clients.append(client)
        return client

    async def close(self) -> None:
        for client in self._clients:
            await client.close()
        await self.store.close()


@pytest.fixture(params=["bookies", "memory"])
async def ledgers(request, tmp_path):
    url = f"memory://ml-{uuid.uuid4().hex[:12]}"
    backend = Cluster(tmp_path, url) if request.param == "bookies" else MemoryLedgers(url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()
