"""Position arithmetic of a managed ledger: pure methods of ManagedLedgerInfo, from tables.

The log used by every case: ledger 1 holds 3 entries, ledger 2 none, ledger 3
two, and ledger 4 (the one being written) none yet.
"""

from __future__ import annotations

import pytest

from storage.managed_ledger.metadata import LedgerInfo, ManagedLedgerInfo
from storage.managed_ledger.position import Position as P


def _log() -> ManagedLedgerInfo:
    return ManagedLedgerInfo(ledgers=[LedgerInfo(1, 3, 30, 0.0), LedgerInfo(2, 0, 0, 1.0), LedgerInfo(3, 2, 20, 2.0),
                                      LedgerInfo(4, 0, 0, 3.0)])


@pytest.mark.parametrize("position, expected", [
    (P(-1, 0), P(1, 0)),   # before everything: the first entry
    (P(1, -1), P(1, 0)),
    (P(1, 2), P(1, 2)),    # an existing entry is itself
    (P(1, 3), P(3, 0)),    # past the end of ledger 1, over the empty ledger 2
    (P(2, 0), P(3, 0)),    # inside the empty ledger
    (P(3, 1), P(3, 1)),
    (P(3, 2), P(4, 0)),    # past the last entry: where the next add goes
    (P(9, 0), P(4, 0)),    # past the log
])
def test_normalize(position, expected):
    assert _log().normalize(position) == expected


@pytest.mark.parametrize("position, expected", [
    (P(1, -1), P(1, 0)),
    (P(1, 0), P(1, 1)),
    (P(1, 2), P(3, 0)),
    (P(3, 1), P(4, 0)),
])
def test_position_after(position, expected):
    assert _log().position_after(position) == expected


@pytest.mark.parametrize("position, expected", [
    (P(1, 0), P(1, -1)),   # nothing before the first entry: "before ledger 1"
    (P(1, 2), P(1, 1)),
    (P(3, 0), P(1, 2)),    # back over the empty ledger 2
    (P(4, 0), P(3, 1)),
    (P(3, 5), P(3, 1)),    # beyond a ledger's end: its last entry
])
def test_position_before(position, expected):
    assert _log().position_before(position) == expected


@pytest.mark.parametrize("after, upto, expected", [
    (P(1, -1), P(3, 1), 5),
    (P(1, 2), P(3, 1), 2),
    (P(1, 0), P(1, 2), 2),
    (P(3, 1), P(3, 1), 0),
    (P(3, 1), P(1, 0), 0),  # an empty interval
])
def test_entries_between(after, upto, expected):
    assert _log().entries_between(after, upto) == expected


@pytest.mark.parametrize("index, expected", [(0, P(1, 0)), (2, P(1, 2)), (3, P(3, 0)), (4, P(3, 1)), (5, None)])
def test_position_at_index(index, expected):
    assert _log().position_at_index(index) == expected


def test_ends_sizes_and_counts():
    log = _log()
    assert log.first_position == P(1, 0)
    assert log.next_position == P(4, 0)
    assert log.last_confirmed() == P(3, 1)
    assert (log.ledger_entries(3), log.ledger_entries(2), log.ledger_entries(7)) == (2, 0, 0)
    assert (log.number_of_entries, log.total_size) == (5, 50)


@pytest.mark.parametrize("ledgers, expected", [
    ([], P(-1, -1)),
    ([LedgerInfo(5)], P(5, -1)),                               # a log with no entry yet
    ([LedgerInfo(5, 2), LedgerInfo(6)], P(5, 1)),               # the current ledger is still empty
    ([LedgerInfo(5, 2), LedgerInfo(6, 1)], P(6, 0)),
])
def test_last_confirmed(ledgers, expected):
    assert ManagedLedgerInfo(ledgers=ledgers).last_confirmed() == expected


def test_an_empty_log_starts_and_ends_at_the_next_add():
    log = ManagedLedgerInfo(ledgers=[LedgerInfo(7)])
    assert log.first_position == log.next_position == P(7, 0)
    assert log.position_before(log.first_position) == P(7, -1)
    assert log.entries_between(P(7, -1), P(7, -1)) == 0
