"""`broker standalone --single-process`: the whole system in one process, persisted under one data directory.

(The default `broker standalone` runs the same parts as several processes: broker/workers.py.)

It runs the embedded metadata store (``file://<data-dir>/metadata``), three
bookies (``--bookies N``) in zones a, b and c (``<data-dir>/bookie-<a, b, c, ...>``), the broker on
the Pulsar port and its HTTP server. The bookies serve HTTP (health and
Prometheus ``/metrics``) on ``--bookie-http-port`` + 0, 1, 2 (default 8000,
BookKeeper's ``prometheusStatsHttpPort``), and the start-up output prints each
bookie's addresses as bound. Bookies have stable ids
(``standalone-bookie-<letter>``), so their cookies stay valid when ports change
between runs. Everything restarts from disk: topics, subscription positions
and unacknowledged messages come back as they were.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from broker.config import BrokerConfig
from broker.service import BrokerService
from broker.standalone_layout import DEFAULT_BOOKIES, HeldPorts, check_bookie_count, metadata_url, standalone_bookie_configs  # noqa: F401 -- re-exported
from storage.bookie.process import BookieService
from storage.metadata import open_store

log = logging.getLogger(__name__)

def standalone_broker_config(config: BrokerConfig) -> BrokerConfig:
    """The broker's config with what cannot apply to the standalone's own bookies removed."""
    if config.bookkeeper_tls_trust_certs_file_path:
        # The embedded bookies serve plain TCP on loopback; a Pulsar file's bookkeeperTLS* would make every add fail.
        log.warning("standalone: ignoring bookkeeper_tls_* (bookkeeperTLS*): the embedded bookies are plain, on loopback")
        config = dataclasses.replace(config, bookkeeper_tls_trust_certs_file_path=None,
                                     bookkeeper_tls_client_authentication=False)
    return config


@dataclass
class Standalone:
    broker: BrokerService
    bookies: list[BookieService]
    store: object

    @classmethod
    async def start(cls, data_dir: Path, config: BrokerConfig, bookie_port: int,
                    bookie_http_port: int = 0, bookie_count: int = DEFAULT_BOOKIES) -> "Standalone":
        """Raises ValueError for a bookie count the config's ensemble size cannot use, OSError when a port is taken
        (a bookie's HTTP port included: it never moves silently, since Prometheus scrape configs name it),
        StorageError or BrokerError when a part cannot start."""
        check_bookie_count(bookie_count, config)
        data_dir = data_dir.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        config = standalone_broker_config(config)
        store = await open_store(config.metadata_store_url)
        bookies: list[BookieService] = []
        held = HeldPorts(config.host)
        try:
            configs = standalone_bookie_configs(
                data_dir, config.metadata_store_url, bookie_port, config.host, bookie_http_port, bookie_count,
                journal_sync_data=config.journal_sync_data, pick_port=held,
                avoid=(config.port, config.http_port, config.tls_port, config.https_port, config.stream_port))
            held.release()
            for bookie_config in configs:
                bookies.append(await BookieService.start(bookie_config, store=store))
            broker = await BrokerService.start(config, store=store)
        except BaseException:
            for bookie in reversed(bookies):
                await bookie.stop()
            held.release()
            await store.close()
            raise
        return cls(broker, bookies, store)

    def bookie_lines(self, address: str) -> list[str]:
        """One line per bookie for the start-up output: its id, data and HTTP (metrics) addresses as bound, zone.

        Not the ``bookie`` CLI's ready line: scripts wait for the broker's `` ready (`` in this output."""
        return [f"bookie {b.bookie_id} serving (bookie://{address}:{b.port}, metrics http://{address}:{b.http_port}"
                f"/metrics; zone {b.config.network_location.split('/')[1].removeprefix('zone-')})"
                for b in self.bookies]

    async def stop(self) -> None:
        await self.broker.close()
        for bookie in reversed(self.bookies):
            await bookie.stop()
        await self.store.close()
