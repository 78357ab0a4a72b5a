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
