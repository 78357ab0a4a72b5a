"""Which ledgers a managed ledger may delete: a pure decision, tested from tables.

Pulsar's retention rule: walking from the oldest ledger, a ledger goes when
every durable cursor has consumed all of it and retention no longer keeps
it -- it is older than ``time_s``, *or* keeping it would leave more than
``size_bytes`` retained (-1 = no limit on that axis). The walk stops at the
first ledger that must stay, and never reaches the last ledger (the one
being written). ManagedLedger.trim carries the decision out (the two-phase
deletion); nothing here changes state.
"""

from __future__ import annotations

from typing import NamedTuple

from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.metadata import LedgerInfo, ManagedLedgerInfo
from storage.managed_ledger.position import Position


class Retention(NamedTuple):
    time_s: float  # -1: keep forever; 0: delete as soon as consumed
    size_bytes: float  # -1: no size limit

    @classmethod
    def of(cls, config: ManagedLedgerConfig) -> "Retention":
        return cls(config.retention_time_s, config.retention_size_mb * 1024 * 1024)


def ledgers_to_trim(info: ManagedLedgerInfo, slowest_position: Position | None, now: float,
                    retention: Retention) -> list[LedgerInfo]:
    """The oldest ledgers to delete, in order.

    ``slowest_position`` is the lowest mark-delete position of the durable
    cursors (None when there are none: nothing holds the data back).
    """
    total = info.total_size
    doomed: list[LedgerInfo] = []
    for ledger in info.ledgers[:-1]:
        consumed = slowest_position is None or slowest_position >= Position(ledger.ledger_id, ledger.entries - 1)
        if not consumed:
            break
        expired = retention.time_s >= 0 and now - ledger.timestamp > retention.time_s
        over_size = retention.size_bytes >= 0 and total - ledger.size >= retention.size_bytes
        if not (expired or over_size):
            break
        doomed.append(ledger)
        total -= ledger.size
    return doomed
