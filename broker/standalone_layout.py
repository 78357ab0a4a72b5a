"""Where `broker standalone` puts its parts: how many bookies, their ids, ports, zones and data directories, and its
metadata store. Light on purpose: the supervisor (broker/workers.py) and the CLI read it without importing the broker.
"""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from storage.bookie.config import BookieConfig

ZONES = ("a", "b", "c")
DEFAULT_BOOKIES = 3
MAX_BOOKIES = 26  # one letter each for ids and data directories, a to z


def check_bookie_count(count: int, config: BrokerConfig) -> None:
    """Raises ValueError when ``count`` standalone bookies cannot serve ``config``'s ledgers: every ledger needs
    managed_ledger_ensemble_size distinct bookies (E >= Qw >= Qa is the config's own check)."""
    if not 1 <= count <= MAX_BOOKIES:
        raise ValueError(f"--bookies must be between 1 and {MAX_BOOKIES}, not {count}")
    if config.managed_ledger_ensemble_size > count:
        raise ValueError(
            f"--bookies {count} is fewer than the ledger ensemble size managedLedgerDefaultEnsembleSize "
            f"(managed_ledger_ensemble_size) = {config.managed_ledger_ensemble_size}: every ledger needs that many "
            f"distinct bookies; run --bookies {config.managed_ledger_ensemble_size} or more, or lower E/Qw/Qa "
            f"(now {config.managed_ledger_ensemble_size}/{config.managed_ledger_write_quorum}/"
            f"{config.managed_ledger_ack_quorum})")


def bookie_letter(i: int) -> str:
    return chr(ord("a") + i)


def standalone_bookie_configs(data_dir: Path, metadata_url: str, first_port: int, host: str = "127.0.0.1",
                              first_http_port: int = 0, count: int = DEFAULT_BOOKIES,
                              journal_sync_data: bool = True) -> list[BookieConfig]:
    """Bookie i (``standalone-bookie-a``, ``-b``, ...) listens on ``first_port + i`` and serves HTTP on
    ``first_http_port + i`` (0: any free port for each). ``journal_sync_data`` is the broker config's
    ``journalSyncData`` (BrokerConfig.journal_sync_data). Zones stay a, b and c, a fourth bookie joining zone a
    (upgrade domain ``ud<i>``), so every write set still spans zones as in a cluster of three zones."""
    return [
        BookieConfig(
            metadata_store_url=metadata_url, data_dir=data_dir / f"bookie-{bookie_letter(i)}", host=host,
            port=first_port + i, http_port=first_http_port + i if first_http_port else 0,
            bookie_id=f"standalone-bookie-{bookie_letter(i)}", network_location=f"/zone-{ZONES[i % len(ZONES)]}/ud{i}",
            # One process, one disk: sync as soon as the journal queue is empty instead of waiting up to
            # journal_max_group_wait_ms; groups still form while an fsync is in progress.
            journal_flush_when_queue_empty=True,
            journal_sync_data=journal_sync_data,
        ).validate()
        for i in range(count)
    ]


def metadata_url(data_dir: Path) -> str:
    return f"file://{data_dir.resolve() / 'metadata'}"
