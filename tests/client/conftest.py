"""In-process cluster for ledger-client tests: real bookies on free ports, a memory:// metadata store."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from storage.bookie.config import BookieConfig
from storage.bookie.faults import JournalFaults
from storage.bookie.process import BookieService
from storage.client import ClientConfig, FaultPlan, LedgerClient
from storage.errors import NoSuchEntryError
from storage.metadata import open_store
from storage.testing.processes import free_port
from storage.testing.waiting import wait_until_async


async def wait_for_copy(client: LedgerClient, bookie_id: str, ledger_id: int, entry_id: int, timeout_s: float = 5.0):
    """Until ``bookie_id`` serves the entry (its add may still be in its journal); returns the ReadResponse."""

    async def served():
        try:
            return await client.context.pool.read(bookie_id, ledger_id, entry_id)
        except NoSuchEntryError:
            return None

    return await wait_until_async(served, timeout_s, f"bookie {bookie_id} to serve entry {entry_id} of ledger {ledger_id}")


class HoldingStore:
    """Metadata-store wrapper whose next ``set`` can be parked until the test releases it."""

    def __init__(self, inner):
        self._inner = inner
        self._holds: list[_Gate] = []

    def hold_next_set(self, prefix: str = "/ledgers/") -> "_Gate":
        gate = _Gate(prefix)
        self._holds.append(gate)
        return gate

    async def set(self, path, data, expected_version=-1):
        for gate in self._holds:
            if path.startswith(gate.prefix):
                self._holds.remove(gate)
                gate.reached.set_result(path)
                await gate.opened
                break
        return await self._inner.set(path, data, expected_version)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Gate:
    def __init__(self, prefix: str):
        loop = asyncio.get_running_loop()
        self.prefix = prefix
        self.reached = loop.create_future()
        self.opened = loop.create_future()

    def release(self) -> None:
        if not self.opened.done():
            self.opened.set_result(None)


class Cluster:
    """Real in-process bookies (``BookieService``) on free ports, sharing one memory:// metadata tree.

    Bookies are spread round-robin over ``zones``, each in its own upgrade
    domain. Clients made here are closed (and bookies stopped) at teardown.
    """

    def __init__(self, root, url: str):
        self.root = root
        self.url = url
        self.services: dict[str, BookieService] = {}
        self.journal_faults: dict[str, JournalFaults] = {}  # per bookie: hold_next_fsync()
        self.clients: list[LedgerClient] = []
        self.store = None

    async def open(self) -> None:
        self.store = await open_store(self.url)

    async def start_bookies(self, n: int, zones=("zone-a", "zone-b", "zone-c")) -> list[str]:
        ids = []
        for _ in range(n):
            i = len(self.services)
            config = BookieConfig(
                metadata_store_url=self.url, data_dir=self.root / f"bookie-{i}", port=free_port(), http_port=0,
                network_location=f"/{zones[i % len(zones)]}/ud{i}",
                read_only_mode_enabled=False,  # a shared dev disk must not flip bookies read-only mid-test
            ).validate()
            faults = JournalFaults()
            service = await BookieService.start(config, fsync=faults)
            self.services[service.bookie_id] = service
            self.journal_faults[service.bookie_id] = faults
            ids.append(service.bookie_id)
        return ids

    async def stop_bookie(self, bookie_id: str) -> None:
        """Graceful stop: deregister, answer what is in flight, close connections."""
        await self.services[bookie_id].stop()

    async def client(self, config: ClientConfig | None = None, faults: FaultPlan | None = None, store=None, rng=None):
        client = await LedgerClient.open(store or self.store, config or ClientConfig(), faults=faults, rng=rng)
        if self.services:
            # Bookies registered before the client started are read at open; later ones arrive by watch.
            await client.registry.wait_for(lambda r: len(r.bookies()) >= len(self._live()), 5)
        self.clients.append(client)
        return client

    def _live(self):
        return [s for s in self.services.values() if s.serving]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for service in self.services.values():
            if service.serving:
                await service.stop()
        await self.store.close()


@pytest.fixture
async def cluster(tmp_path):
    c = Cluster(tmp_path, f"memory://client-{uuid.uuid4().hex[:12]}")
    await c.open()
    try:
        yield c
    finally:
        await c.close()
