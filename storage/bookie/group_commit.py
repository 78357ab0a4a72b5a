"""When the journal writer flushes a group: a pure decision (STYLE.md 5).

How group commit works: adds queue up in front of one writer thread; the
thread collects them into a *group*, writes the group with one write() and
makes it durable with one fdatasync, then acknowledges every add in it. An
fdatasync costs about the same for 1 record as for 500, so grouping is what
turns a disk that does ~4k fsyncs/s into one that acknowledges far more adds.
The price is latency: a record may wait for company. Three knobs bound it
(BookKeeper's journalMaxGroupWaitMSec, journalBufferedWritesThreshold,
journalFlushWhenQueueEmpty):

* the oldest pending record has waited ``journal_max_group_wait_ms``;
* the group has reached ``journal_buffered_writes_threshold_bytes``;
* nothing else is queued and ``journal_flush_when_queue_empty`` is set
  (lowest latency under light load, at the cost of smaller groups).

A zero wait means "never hold a record back", i.e. flush whenever anything is
pending. Time is passed in (``now_ms``), so the table of cases in the tests
drives this with a fake clock and no threads.
"""

from __future__ import annotations

from storage.bookie.config import BookieConfig


def should_flush(
    now_ms: float,
    oldest_pending_ms: float | None,
    pending_bytes: int,
    queue_empty: bool,
    config: BookieConfig,
) -> bool:
    """True if the pending group must be written and synced now.

    ``oldest_pending_ms`` is when the oldest pending record was queued (None
    when nothing is pending); ``queue_empty`` says no further record is
    waiting to be taken into the group right now.
    """
    if oldest_pending_ms is None:
        return False
    if pending_bytes >= config.journal_buffered_writes_threshold_bytes:
        return True
    if now_ms - oldest_pending_ms >= config.journal_max_group_wait_ms:
        return True
    return queue_empty and config.journal_flush_when_queue_empty


def wait_budget_ms(now_ms: float, oldest_pending_ms: float | None, config: BookieConfig) -> float | None:
    """How long the writer may block waiting for another record.

    None: block until a record arrives (nothing is pending, so nothing can
    be late). Otherwise the time left before the oldest record's wait expires,
    never negative.
    """
    if oldest_pending_ms is None:
        return None
    return max(0.0, config.journal_max_group_wait_ms - (now_ms - oldest_pending_ms))
