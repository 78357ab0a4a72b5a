"""Which positions a cursor reads next: unconsumed_positions, a pure function of the ledger list and the acks."""

from __future__ import annotations

import pytest

from storage.managed_ledger.ack_ranges import AckRanges
from storage.managed_ledger.cursor import unconsumed_positions
from storage.managed_ledger.metadata import LedgerInfo, ManagedLedgerInfo

# Ledger 1: 5 entries, ledger 2: none, ledger 3: 4 entries, ledger 4 (being written): none yet.
LOG = ManagedLedgerInfo(ledgers=[LedgerInfo(1, 5), LedgerInfo(2, 0), LedgerInfo(3, 4), LedgerInfo(4, 0)])


def _acked(*positions) -> AckRanges:
    ranges = AckRanges()
    for ledger_id, entry_id in positions:
        ranges.add(ledger_id, entry_id)
    return ranges


@pytest.mark.parametrize("acked, start, limit, expected", [
    ((), (1, 0), 3, [(1, 0), (1, 1), (1, 2)]),
    ((), (1, 3), 4, [(1, 3), (1, 4), (3, 0), (3, 1)]),            # over the empty ledger 2
    (((1, 1), (1, 2)), (1, 0), 3, [(1, 0), (1, 3), (1, 4)]),      # jumps over an acked run
    (((1, 3), (1, 4), (3, 0)), (1, 3), 2, [(3, 1), (3, 2)]),      # an acked run across a ledger boundary
    (((3, 0), (3, 1), (3, 2), (3, 3)), (3, 0), 10, []),           # all acked to the end: nothing
    ((), (3, 2), 10, [(3, 2), (3, 3)]),                           # the end of the log
    ((), (4, 0), 10, []),                                         # the next add's position: nothing yet
    ((), (1, 0), 0, []),
])
def test_unconsumed_positions(acked, start, limit, expected):
    from storage.managed_ledger.position import Position

    got = unconsumed_positions(LOG, _acked(*acked), Position(*start), limit)
    assert got == [Position(*p) for p in expected]
