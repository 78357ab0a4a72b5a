"""BookieService: one whole bookie -- cookie, core, protocol server, registration, HTTP, GC, disk monitor.

Start-up order matters:

1. open the metadata store (or use the one given: standalone mode shares one tree);
2. check the cookie -- a bookie pointed at the wrong or wiped directories
   refuses to start before it touches them;
3. open the core (journal replay happens here);
4. serve the protocol, then HTTP;
5. measure the disk once, then register (writable or read-only), so clients
   never see a bookie that is not ready;
6. start the GC and disk-monitor loops; /health answers 200 from here on
   (503 before, while stopping, and after a journal failure).

Stopping reverses it: deregister first so clients stop choosing this bookie,
then drain the server, stop the loops, close the core (which checkpoints).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Callable

from prometheus_client import CollectorRegistry, Gauge

from storage.autorecovery.config import AutoRecoveryConfig
from storage.autorecovery.service import AutoRecoveryService
from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.bookie.cookie import check_and_write_cookie
from storage.bookie.disk_monitor import DiskMonitor, Mode
from storage.bookie.faults import JournalFaults
from storage.bookie.gc import GarbageCollector
from storage.bookie.http import start_http
from storage.bookie.journal import JournalDamage
from storage.bookie.journal_damage import Verdict, journal_verdict
from storage.bookie.registration import Registration
from storage.bookie.scrub import Scrubber
from storage.bookie.server import BookieServer
from storage.client.config import ClientConfig
from storage.errors import NoNodeError
from storage.ledger_metadata import LedgerMetadata
from storage.metadata import MetadataStore, open_store, paths
from storage.network_location import parse_network_location

log = logging.getLogger(__name__)

_METADATA_BATCH = 100  # concurrent metadata reads when judging journal damage


class BookieService:
    def __init__(self, config: BookieConfig):
        self.config = config
        self.registry = CollectorRegistry()
        self.store: MetadataStore | None = None
        self.bookie: Bookie | None = None
        self.server: BookieServer | None = None
        self.registration: Registration | None = None
        self.disk_monitor: DiskMonitor | None = None
        self.gc: GarbageCollector | None = None
        self.autorecovery = None  # AutoRecoveryService when config.autorecovery_enabled
        self.scrubber: Scrubber | None = None
        self.journal_faults: JournalFaults | None = None  # fault-injection mode only (faults.py)
        self.serving = False
        self._stopping = False
        self._journal_failure_noticed = False
        self._owns_store = False
        self._http = None
        self._tasks: list[asyncio.Task] = []
        self._disk_usage = Gauge("bookie_disk_usage_bytes", "Bytes used by journal and ledger dirs",
                                 registry=self.registry)
        self._disk_usage_ratio = Gauge("bookie_disk_usage_ratio", "Used fraction of the fullest filesystem holding "
                                       "the journal or ledger dir", registry=self.registry)
        # BookKeeper's name and meaning, which its dashboards use: 1 writable, 0 read-only.
        self._server_status = Gauge("bookie_SERVER_STATUS", "1 while the bookie is writable, 0 while read-only",
                                    registry=self.registry)

    @classmethod
    async def start(
        cls, config: BookieConfig, *, store: MetadataStore | None = None, fsync: Callable[[int], None] | None = None
    ) -> "BookieService":
        """Start a bookie. Raises CookieMismatchError, BookieStartupError (e.g. a damaged
        journal, journal_damage.py), MetadataError, OSError (port in use).

        ``fsync`` replaces the journal's fdatasync (tests: ``storage.bookie.faults.JournalFaults``).
        """
        service = cls(config)
        if isinstance(fsync, JournalFaults):
            service.journal_faults = fsync
        try:
            await service._start(store, fsync)
        except BaseException:
            await service.stop()
            raise
        return service

    async def _start(self, store: MetadataStore | None, fsync: Callable[[int], None] | None) -> None:
        config = self.config
        if store is None:
            store = await open_store(config.metadata_store_url, session_timeout_s=config.session_timeout_s)
            self._owns_store = True
        self.store = store
        await check_and_write_cookie(store, config)
        self.bookie = await Bookie.open(config, registry=self.registry, fsync=fsync, judge_damage=self._judge_damage)
        self.server = await BookieServer.start(self.bookie, store, config, self.registry)
        bookie = self.bookie
        self.disk_monitor = DiskMonitor(config, self._mode_changed, journal_error=lambda: bookie.journal_failed,
                                        journal_damage=lambda: bookie.journal_damage)
        await self.disk_monitor.check_once()  # no registration yet: this only sets the server's mode
        self.server.set_read_only(self.disk_monitor.read_only, self.disk_monitor.mode.reason)
        self.server.on_journal_failure = self._journal_failed
        self._http = await start_http(self, config.host, config.http_port, config.http_admin_token)
        self.registration = Registration(store, config, self.http_port)
        # The mode is read again here: an HTTP override may have landed while HTTP started.
        await self.registration.register(self.disk_monitor.read_only)
        self.gc = GarbageCollector(self.bookie, store, config)
        self._tasks.append(asyncio.ensure_future(self.gc.run_forever()))
        # Runs even with read_only_mode_enabled = false: it also notices a failed journal.
        self._tasks.append(asyncio.ensure_future(self.disk_monitor.run_forever()))
        if config.local_scrub_period_s > 0:
            self.scrubber = Scrubber(self.bookie, store, config.local_scrub_period_s,
                                     config.local_scrub_rate_limit_entries_per_s, self.registry)
            self._tasks.append(asyncio.ensure_future(self.scrubber.run_forever()))
        if config.autorecovery_enabled:
            self.autorecovery = await AutoRecoveryService.start(
                store, AutoRecoveryConfig.from_bookie(config), config.bookie_id, self.registry,
                ClientConfig(**config.client_tls()))
        self.serving = True
        log.info("bookie %s serving on %s:%d (http %d, %s, %s)", config.bookie_id, config.host, self.port,
                 self.http_port, config.network_location, "read-only" if self.read_only else "writable")

    async def _judge_damage(self, damage: list[JournalDamage], ledger_ids: set[int]) -> Verdict:
        """Journal damage at start: which of these ledgers could lose an entry for good (ack quorum 1, here)?"""
        store, me = self.store, self.config.bookie_id

        async def unreplicated(ledger_id: int) -> bool:
            try:
                data, _ = await store.get(paths.ledger_path(ledger_id))
            except NoNodeError:
                return False  # deleted: nothing to lose
            md = LedgerMetadata.from_bytes(data)
            return md.ack_quorum_size < 2 and any(me in ensemble for _, ensemble in md.ensembles)

        ids = sorted(ledger_ids)
        found: list[int] = []
        for i in range(0, len(ids), _METADATA_BATCH):
            batch = ids[i : i + _METADATA_BATCH]
            found += [lid for lid, bad in zip(batch, await asyncio.gather(*map(unreplicated, batch))) if bad]
        return journal_verdict(damage, self.config.journal_corruption_policy, found)

    def _journal_failed(self) -> None:
        """An add found the journal failed: re-decide the mode now (read-only for good), once."""
        if self._journal_failure_noticed or self.disk_monitor is None:
            return
        self._journal_failure_noticed = True
        task = asyncio.ensure_future(self.disk_monitor.check_once())
        self._tasks.append(task)

    async def _mode_changed(self, mode: Mode) -> None:
        if self.server is not None:
            self.server.set_read_only(mode.read_only, mode.reason)
        # Not before the first registration (start-up registers the mode it
        # finds) nor once stop() began: a late HTTP override must not
        # re-register a bookie that is going away. Registration serialises
        # concurrent register calls, so the last mode decided is the one left.
        if self.registration is not None and not self._stopping:
            await self.registration.register(mode.read_only)

    async def force_read_only(self, read_only: bool | None) -> None:
        """Admin override of the disk monitor (None returns control to it)."""
        self.disk_monitor.force(read_only)
        await self.disk_monitor.check_once()

    def health(self) -> tuple[bool, str]:
        """(healthy, why) for /health: serving, and with a journal that still acknowledges adds."""
        if not self.serving:
            return False, "not serving (starting or stopping)"
        failed = self.bookie.journal_failed if self.bookie is not None else None
        if failed is not None:
            return False, f"journal failed: {failed}"
        return True, "OK"

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def http_port(self) -> int:
        return self._http.addresses[0][1] if self._http and self._http.addresses else self.config.http_port

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

    @property
    def read_only(self) -> bool:
        return bool(self.server and self.server.read_only)

    def refresh_gauges(self) -> None:
        """Called on each /metrics scrape: gauges that are measured rather than counted."""
        if self.bookie is not None:
            self._disk_usage.set(self.bookie.disk_usage_bytes())
        if self.disk_monitor is not None:
            self._disk_usage_ratio.set(self.disk_monitor.last_usage)
        self._server_status.set(0 if self.read_only else 1)

    def info(self) -> dict:
        described = self.registration.describe() if self.registration else {}
        zone, upgrade_domain = parse_network_location(self.config.network_location)
        mode = self.disk_monitor.mode if self.disk_monitor else None
        return {
            **described,
            "bookie_id": self.config.bookie_id,
            "zone": zone,
            "upgrade_domain": upgrade_domain,
            "serving": self.serving,
            "state": "readonly" if self.read_only else "writable",
            "state_reason": mode.reason if mode else "",
            "disk_usage_fraction": self.disk_monitor.last_usage if self.disk_monitor else None,
            "ledgers": len(self.bookie.ledger_ids()) if self.bookie else 0,
            "journal_fsync_latency": self.bookie.metrics.recent_fsync_ms() if self.bookie else None,
            **self._disk_space(),
        }

    def _disk_space(self) -> dict:
        """The ledger directory's file system (statvfs: cheap, unlike walking the tree for our own bytes)."""
        try:
            usage = shutil.disk_usage(self.config.ledger_dir)
        except OSError:
            return {"disk_total_bytes": None, "disk_free_bytes": None}
        return {"disk_total_bytes": usage.total, "disk_free_bytes": usage.free}

    async def stop(self) -> None:
        """Deregister, drain and close everything this service started. Idempotent."""
        self.serving = False
        self._stopping = True
        if self.scrubber is not None:
            self.scrubber.stopped = True
        if self.autorecovery is not None:
            await self.autorecovery.stop()
            self.autorecovery = None
        if self.registration is not None:
            try:
                await self.registration.unregister()
            except Exception as exc:  # the store may be gone already; the node is ephemeral anyway
                log.warning("could not deregister %s: %s", self.config.bookie_id, exc)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        if self.bookie is not None:
            await self.bookie.close()
            self.bookie = None
        if self._owns_store and self.store is not None:
            await self.store.close()
            self.store = None

    async def __aenter__(self) -> "BookieService":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
