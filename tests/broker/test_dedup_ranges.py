"""Deduplication's classification of a SEND's sequence range (pure: no storage)."""

from __future__ import annotations

import pytest

from broker.topics.dedup import Deduplication, DupStatus


class _Enabled(Deduplication):
    """The table alone; enabling for real opens a cursor on a managed ledger."""

    enabled = True


@pytest.mark.parametrize("pushed,persisted,send,status", [
    (-1, -1, (0, 0), DupStatus.NEW),
    (4, 4, (5, 9), DupStatus.NEW),
    (9, 9, (5, 9), DupStatus.DUPLICATE),  # a resend of a stored batch
    (9, 4, (5, 9), DupStatus.UNKNOWN),  # its first copy is still being stored
    # seed 2 of the nemesis: key batches A = 224, 228, ..., 248 and B = 225, ..., 249 sent under their lowest ids;
    # B straddles what A pushed, so it is partly new and must not be acknowledged as a duplicate
    (248, 248, (225, 249), DupStatus.UNKNOWN),
    (248, 200, (225, 249), DupStatus.UNKNOWN),
])
def test_a_send_range_is_new_a_duplicate_or_unknown(pushed, persisted, send, status):
    dedup = _Enabled()
    dedup.pushed["p"], dedup.persisted["p"] = pushed, persisted
    assert dedup.check("p", *send) is status
    if status is DupStatus.NEW:
        assert dedup.pushed["p"] == send[1]
