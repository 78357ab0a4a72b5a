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

Large records do not hold small ones back (``commit_order``). An fdatasync
costs the bytes it makes durable: behind a 5 MiB entry in one group, a
100-byte add waited for 5 MiB to reach the disk (tens of ms with other
journals writing). So the writer keeps taking small records queued behind a
large one (``keep_taking``), and commits a group in two steps: first the
small adds -- written, synced and acknowledged -- then the large ones. Only
ADDs of ledgers that have no large ADD in the group move, and never across a
FENCE or MASTER_KEY record, so each ledger's records stay in order and a
fence is still durable only with every add queued before it.
"""

from __future__ import annotations

from typing import Sequence

from storage.bookie.config import BookieConfig

# A record this large is written after the small ADDs of its group (the journal's ADD, FENCE, MASTER_KEY kinds).
LARGE_RECORD_BYTES = 256 * 1024
ADD = 1
# However much is queued, one group takes no more than this (a bound on one write and one fdatasync).
MAX_GROUP_BYTES = 64 * 1024 * 1024


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


def keep_taking(small_bytes: int, group_bytes: int, config: BookieConfig) -> bool:
    """Whether the writer takes another queued record into the group: until the small records alone reach the
    threshold (a large record does not close the group to the small ones queued behind it), and never past
    MAX_GROUP_BYTES."""
    return small_bytes < config.journal_buffered_writes_threshold_bytes and group_bytes < MAX_GROUP_BYTES


def commit_order(records: Sequence[tuple[int, int, int]]) -> list[list[int]]:
    """The commits of one group, each a list of indexes into ``records`` ((kind, ledger id, bytes) in queue
    order): small ADDs ahead of the large ADDs queued before them, as described above. One commit when nothing
    moves."""
    first: list[int] = []
    second: list[int] = []
    held_ledgers: set[int] = set()
    barrier = False  # a FENCE or MASTER_KEY after a large ADD: nothing moves across it
    for i, (kind, ledger_id, size) in enumerate(records):
        if not held_ledgers:
            if kind == ADD and size >= LARGE_RECORD_BYTES:
                held_ledgers.add(ledger_id)
                second.append(i)
            else:
                first.append(i)
            continue
        if kind != ADD:
            barrier = True
        if not barrier and kind == ADD and size < LARGE_RECORD_BYTES and ledger_id not in held_ledgers:
            first.append(i)
            continue
        if kind == ADD and size >= LARGE_RECORD_BYTES:
            held_ledgers.add(ledger_id)
        elif kind == ADD:
            held_ledgers.add(ledger_id)  # this ledger's later small adds stay behind this one
        second.append(i)
    return [c for c in (first, second) if c]
