"""Where `broker standalone` puts its parts: how many bookies, their ids, ports, zones and data directories, and its
metadata store. Light on purpose: the supervisor (broker/workers.py) and the CLI read it without importing the broker.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable, Iterable

from broker.config import BrokerConfig
from storage.bookie.config import BookieConfig

ZONES = ("a", "b", "c")
DEFAULT_BOOKIES = 3
MAX_BOOKIES = 26  # one letter each for ids and data directories, a to z
MAX_PORT_PICKS = 100  # picks for one listener before a plan gives up


class HeldPorts:
    """Free ports on ``host``, each kept bound until ``release()``: while a plan is made no two picks, and no other
    process binding port 0, can get the same port. The children bind them after the release."""

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self._sockets: list[socket.socket] = []

    def __call__(self) -> int:
        s = socket.socket()
        self._sockets.append(s)
        s.bind((self.host, 0))
        return s.getsockname()[1]

    def release(self) -> None:
        for s in self._sockets:
            s.close()
        self._sockets.clear()


def pick_distinct(pick_port: Callable[[], int], taken: set[int]) -> int:
    """A port from ``pick_port`` that is not in ``taken`` (a port the plan already uses, bound or not yet), added to
    it. A port-0 bind cannot know of a port a sibling will bind later: this is what keeps them apart."""
    for _ in range(MAX_PORT_PICKS):
        if (picked := pick_port()) not in taken:
            taken.add(picked)
            return picked
    raise ValueError(f"no free port distinct from the plan's {sorted(taken)} after {MAX_PORT_PICKS} picks")


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
                              journal_sync_data: bool = True, pick_port: Callable[[], int] | None = None,
                              avoid: Iterable[int | None] = ()) -> list[BookieConfig]:
    """Bookie i (``standalone-bookie-a``, ``-b``, ...) listens on ``first_port + i`` and serves HTTP on
    ``first_http_port + i``. With ``first_http_port`` 0, each HTTP port is ``pick_port``'s, distinct from every
    bookie port and from ``avoid`` (the broker's), or 0 (any) without ``pick_port``: a bookie's port-0 bind could
    otherwise take a sibling's port before the sibling binds it. ``journal_sync_data`` is the broker config's
    ``journalSyncData`` (BrokerConfig.journal_sync_data). Zones stay a, b and c, a fourth bookie joining zone a
    (upgrade domain ``ud<i>``), so every write set still spans zones as in a cluster of three zones."""
    ports = [first_port + i for i in range(count)]
    if first_http_port:
        http_ports = [first_http_port + i for i in range(count)]
    elif pick_port is not None:
        taken = {*ports, *(p for p in avoid if p)}
        http_ports = [pick_distinct(pick_port, taken) for _ in range(count)]
    else:
        http_ports = [0] * count
    return [
        BookieConfig(
            metadata_store_url=metadata_url, data_dir=data_dir / f"bookie-{bookie_letter(i)}", host=host,
            port=ports[i], http_port=http_ports[i],
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
