"""In-process bookies for autorecovery tests: real BookieServices on a memory:// store, autorecovery driven by hand."""

from __future__ import annotations

import uuid

import pytest

from storage.bookie.config import BookieConfig
from storage.bookie.process import BookieService
from storage.testing.processes import free_port
from tests.client.conftest import Cluster


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecoveryCluster(Cluster):
    """Bookies with their own autorecovery off: tests run the auditor and workers themselves."""

    async def start_bookies(self, n: int, zones=("zone-a", "zone-b", "zone-c"), **config) -> list[str]:
        ids = []
        for _ in range(n):
            i = len(self.services)
            cfg = BookieConfig(
                metadata_store_url=self.url, data_dir=self.root / f"bookie-{i}", port=free_port(), http_port=0,
                network_location=f"/{zones[i % len(zones)]}/ud{i}", read_only_mode_enabled=False,
                **{"autorecovery_enabled": False, **config},
            ).validate()
            service = await BookieService.start(cfg)
            self.services[service.bookie_id] = service
            ids.append(service.bookie_id)
        return ids

    def zone_of(self, bookie_id: str) -> str:
        return self.services[bookie_id].config.zone


@pytest.fixture
async def rcluster(tmp_path):
    c = RecoveryCluster(tmp_path, f"memory://autorecovery-{uuid.uuid4().hex[:12]}")
    await c.open()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def clock():
    return ManualClock()
