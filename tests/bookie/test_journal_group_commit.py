"""Tier 1: the group-commit decision as a table, with the clock passed in."""

import dataclasses

import pytest

from storage.bookie.config import BookieConfig
from storage.bookie.group_commit import should_flush, wait_budget_ms

BASE = BookieConfig(
    metadata_store_url="mem://",
    data_dir="/nonexistent",
    journal_max_group_wait_ms=2.0,
    journal_buffered_writes_threshold_bytes=1000,
    journal_flush_when_queue_empty=False,
)
EAGER = dataclasses.replace(BASE, journal_flush_when_queue_empty=True)
NO_WAIT = dataclasses.replace(BASE, journal_max_group_wait_ms=0.0)


@pytest.mark.parametrize(
    "now_ms, oldest_ms, pending_bytes, queue_empty, config, expected, why",
    [
        (100.0, None, 0, True, BASE, False, "nothing pending"),
        (100.0, None, 0, True, EAGER, False, "nothing pending, even when eager"),
        (100.0, 100.0, 10, True, BASE, False, "fresh small group waits for company"),
        (101.9, 100.0, 10, False, BASE, False, "just under the group wait"),
        (102.0, 100.0, 10, False, BASE, True, "oldest record waited max_group_wait_ms"),
        (150.0, 100.0, 10, True, BASE, True, "long overdue"),
        (100.0, 100.0, 999, False, BASE, False, "one byte under the threshold"),
        (100.0, 100.0, 1000, False, BASE, True, "threshold reached"),
        (100.0, 100.0, 5000, False, BASE, True, "threshold exceeded"),
        (100.0, 100.0, 10, True, EAGER, True, "queue empty and flush_when_queue_empty"),
        (100.0, 100.0, 10, False, EAGER, False, "eager but more records are queued"),
        (100.0, 100.0, 10, False, NO_WAIT, True, "zero wait flushes whatever is pending"),
    ],
)
def test_should_flush(now_ms, oldest_ms, pending_bytes, queue_empty, config, expected, why):
    assert should_flush(now_ms, oldest_ms, pending_bytes, queue_empty, config) is expected, why


@pytest.mark.parametrize(
    "now_ms, oldest_ms, config, expected",
    [
        (100.0, None, BASE, None),  # block until a record arrives
        (100.0, 100.0, BASE, 2.0),
        (101.5, 100.0, BASE, 0.5),
        (105.0, 100.0, BASE, 0.0),  # overdue: never negative
        (100.0, 100.0, NO_WAIT, 0.0),
    ],
)
def test_wait_budget(now_ms, oldest_ms, config, expected):
    assert wait_budget_ms(now_ms, oldest_ms, config) == expected


# ---- large records do not hold small ones back ----------------------------------

from storage.bookie import journal as _journal  # noqa: E402
from storage.bookie.group_commit import LARGE_RECORD_BYTES, MAX_GROUP_BYTES, commit_order, keep_taking  # noqa: E402

A, F, K = _journal.ADD, _journal.FENCE, _journal.MASTER_KEY
BIG, SMALL = 5 * 1024 * 1024, 100


@pytest.mark.parametrize("records, commits, why", [
    ([(A, 1, SMALL), (A, 2, SMALL)], [[0, 1]], "no large record: one commit"),
    ([(A, 1, BIG)], [[0]], "a large record alone"),
    ([(A, 1, BIG), (A, 2, SMALL), (A, 3, SMALL)], [[1, 2], [0]], "small adds of other ledgers go first"),
    ([(A, 2, SMALL), (A, 1, BIG), (A, 3, SMALL)], [[0, 2], [1]], "what was before the large one stays before it"),
    ([(A, 1, BIG), (A, 1, SMALL), (A, 2, SMALL)], [[2], [0, 1]], "a ledger's own adds keep their order"),
    ([(A, 1, BIG), (A, 2, SMALL), (A, 2, SMALL)], [[1, 2], [0]], "a moved ledger moves whole"),
    ([(A, 1, BIG), (F, 2, 20), (A, 3, SMALL)], [[0, 1, 2]], "nothing crosses a fence"),
    ([(A, 1, BIG), (A, 3, SMALL), (K, 2, 40), (A, 2, SMALL)], [[1], [0, 2, 3]], "nor a master key"),
    ([(F, 2, 20), (A, 1, BIG), (A, 3, SMALL)], [[0, 2], [1]], "a fence before the large add stays first"),
    ([(A, 1, LARGE_RECORD_BYTES - 1), (A, 2, SMALL)], [[0, 1]], "just under large"),
    ([(A, 1, BIG), (A, 2, BIG), (A, 3, SMALL)], [[2], [0, 1]], "several large records"),
])
def test_commit_order(records, commits, why):
    assert commit_order(records) == commits, why


@pytest.mark.parametrize("small_bytes, group_bytes, expected", [
    (0, 0, True),
    (999, 999, True),
    (1000, 1000, False),                     # the small records reached the threshold
    (10, 5 * 1024 * 1024, True),             # a large record does not close the group to small ones
    (10, MAX_GROUP_BYTES, False),            # but a group has a bound
])
def test_keep_taking(small_bytes, group_bytes, expected):
    assert keep_taking(small_bytes, group_bytes, BASE) is expected


def test_the_decision_uses_the_journals_record_kinds():
    from storage.bookie import group_commit

    assert group_commit.ADD == _journal.ADD
