"""ledgers_to_trim: which consumed ledgers retention lets go, from a table."""

from __future__ import annotations

import pytest

from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.metadata import LedgerInfo, ManagedLedgerInfo
from storage.managed_ledger.position import Position as P
from storage.managed_ledger.trimming import Retention, ledgers_to_trim

# Ledgers 1..3 are closed (2 entries, 100 bytes, created at t=0, 10, 20); ledger 4 is being written.
LOG = ManagedLedgerInfo(ledgers=[LedgerInfo(1, 2, 100, 0.0), LedgerInfo(2, 2, 100, 10.0), LedgerInfo(3, 2, 100, 20.0),
                                 LedgerInfo(4, 1, 50, 30.0)])
NO_RETENTION = Retention(0, 0)


@pytest.mark.parametrize("slowest, now, retention, expected", [
    (None, 100, NO_RETENTION, [1, 2, 3]),          # no durable cursor: all but the current ledger
    (P(4, 0), 100, NO_RETENTION, [1, 2, 3]),       # everything consumed: still never the current ledger
    (P(2, 1), 100, NO_RETENTION, [1, 2]),          # the last entry of ledger 2 is consumed
    (P(2, 0), 100, NO_RETENTION, [1]),             # ledger 2 is not all consumed
    (P(1, 0), 100, NO_RETENTION, []),
    (P(1, -1), 100, NO_RETENTION, []),
    (None, 100, Retention(-1, -1), []),            # keep forever
    (None, 75, Retention(60, -1), [1, 2]),         # ledger 3 is only 55 s old
    (None, 75, Retention(-1, 200), [1]),           # 350 bytes; dropping 1 leaves 250 >= 200, dropping 2 would leave 150
    (None, 50, Retention(60, 200), [1]),           # either limit lets a ledger go: size does here
    (None, 65, Retention(60, 1000), [1]),          # and time here (ledger 2 is 55 s old)
    (P(3, 1), 75, Retention(60, -1), [1, 2]),      # consumed but young: the walk stops at the first kept ledger
])
def test_ledgers_to_trim(slowest, now, retention, expected):
    assert [i.ledger_id for i in ledgers_to_trim(LOG, slowest, now, retention)] == expected


def test_the_walk_stops_at_the_first_ledger_retention_keeps():
    # Ledger 1 (300 B) must stay for 200 B of retention; ledger 2 alone could go, but never before ledger 1.
    log = ManagedLedgerInfo(ledgers=[LedgerInfo(1, 2, 300, 0.0), LedgerInfo(2, 2, 100, 10.0), LedgerInfo(3, 1, 50, 20.0)])
    assert ledgers_to_trim(log, None, 100, Retention(-1, 200)) == []


def test_only_the_current_ledger_is_never_trimmed():
    assert ledgers_to_trim(ManagedLedgerInfo(ledgers=[LedgerInfo(9, 5, 500, 0.0)]), None, 1e9, NO_RETENTION) == []


def test_the_decision_does_not_touch_the_list():
    before = ManagedLedgerInfo.from_bytes(LOG.to_bytes())
    ledgers_to_trim(LOG, None, 100, NO_RETENTION)
    assert LOG == before


def test_retention_comes_from_the_config_in_bytes():
    assert Retention.of(ManagedLedgerConfig(retention_time_s=-1, retention_size_mb=1)) == Retention(-1, 1024 * 1024)
    assert Retention.of(ManagedLedgerConfig()) == Retention(0, 0)
