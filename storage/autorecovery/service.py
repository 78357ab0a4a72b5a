"""AutoRecoveryService: an auditor candidate and a replication worker, with their metrics.

Runs inside every bookie process unless ``autorecovery_enabled`` is false
(BookKeeper's ``autoRecoveryDaemonEnabled``), and alone as ``bookie
autorecovery --metadata-store URL`` (which also serves ``/health`` and
``/metrics`` on ``--http-port``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from storage.autorecovery.auditor import Auditor
from storage.autorecovery.config import AutoRecoveryConfig
from storage.autorecovery.worker import ReplicationWorker, RepairStats
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.metadata import MetadataStore

log = logging.getLogger(__name__)


class AutoRecoveryMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.under_replicated = Gauge("bookie_autorecovery_under_replicated_ledgers",
                                      "Ledgers marked under-replicated, as of this worker's last pass", registry=registry)
        self.rereplicated_bytes = Counter("bookie_autorecovery_rereplicated_bytes",
                                          "Entry bytes copied to new bookies by this worker", registry=registry)
        self.rereplicated_entries = Counter("bookie_autorecovery_rereplicated_entries",
                                            "Entries copied to new bookies by this worker", registry=registry)
        self.is_auditor = Gauge("bookie_autorecovery_is_auditor", "1 while this process is the elected auditor",
                                registry=registry)


class AutoRecoveryService:
    def __init__(self, client: LedgerClient, config: AutoRecoveryConfig, owner: str, registry: CollectorRegistry):
        self.client = client
        self.config = config
        self.owner = owner
        self.metrics = AutoRecoveryMetrics(registry)
        stats = RepairStats()
        stats.on_bytes = self._copied
        self.auditor = Auditor(client, config, owner)
        self.worker = ReplicationWorker(client, config, owner, stats=stats)
        self.metrics.under_replicated.set_function(lambda: self.worker.marked)
        self.metrics.is_auditor.set_function(lambda: 1 if self.auditor.is_auditor else 0)
        self._tasks: list[asyncio.Task] = []
        self._owns_client = False

    @classmethod
    async def start(cls, store: MetadataStore, config: AutoRecoveryConfig, owner: str,
                    registry: CollectorRegistry, client_config: ClientConfig | None = None) -> "AutoRecoveryService":
        client = await LedgerClient.open(store, client_config)
        service = cls(client, config, owner, registry)
        service._owns_client = True
        service._tasks = [asyncio.ensure_future(service.auditor.run_forever()),
                          asyncio.ensure_future(service.worker.run_forever())]
        log.info("autorecovery %s started (lost bookie recovery delay %.1fs)", owner,
                 config.lost_bookie_recovery_delay_s)
        return service

    def _copied(self, nbytes: int) -> None:
        self.metrics.rereplicated_bytes.inc(nbytes)
        self.metrics.rereplicated_entries.inc()

    async def stop(self) -> None:
        self.auditor.stopped = self.worker.stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.auditor.resign()
        if self._owns_client:
            await self.client.close()


async def run_standalone(url: str, config: AutoRecoveryConfig, owner: str, host: str, http_port: int,
                         stop: asyncio.Event, ready: Callable[[str], None],
                         client_config: ClientConfig | None = None) -> None:
    """`bookie autorecovery`: auditor candidate + worker on their own session, /health and /metrics on HTTP.

    ``client_config`` carries the TLS settings when the bookies serve TLS."""
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from storage.metadata import open_store

    registry = CollectorRegistry()
    store = await open_store(url, session_timeout_s=config.session_timeout_s)
    try:
        service = await AutoRecoveryService.start(store, config, owner, registry, client_config)
    except BaseException:
        await store.close()
        raise

    async def health(_request):
        alive = all(not t.done() for t in service._tasks)
        return web.Response(status=200 if alive else 503, text="OK" if alive else "autorecovery stopped")

    async def metrics(_request):
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/health", health), web.get("/metrics", metrics)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, http_port, reuse_address=True)
        await site.start()
        ready(f"autorecovery {owner} ready (http {host}:{runner.addresses[0][1]}, metadata store {url})")
        await stop.wait()
    finally:
        await runner.cleanup()
        await service.stop()
        await store.close()
