"""The dispatch loop outlives a failure: an unexpected error while handing entries out is logged, the cursor
rewinds, and delivery goes on (a loop that died was a silent stall of the whole subscription)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.subscriptions.consumer import Consumer
from broker.subscriptions.shared import SharedDispatcher
from broker.subscriptions.single_active import SingleActiveConsumerDispatcher
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import encode_headers_and_payload
from storage.errors import ManagedLedgerFencedError
from storage.managed_ledger.lifecycle import ManagedLedgerState
from storage.testing.waiting import wait_until_async


class Entry:
    def __init__(self, position, data):
        self.position, self.data = position, data


class Cursor:
    """ManagedCursor's reading rules on a list of entries: a read position, "a seek during a read wins",
    waiting at the tail until the test publishes (``publish``), rewind to just after the mark-delete."""

    def __init__(self, count: int):
        self.entries = []
        for _ in range(count):
            self._append()
        self.read_position = (1, 0)
        self.mark_delete_position = (1, -1)
        self._waiters: list[asyncio.Future] = []

    def _append(self) -> None:
        i = len(self.entries)
        md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
        self.entries.append(Entry((1, i), encode_headers_and_payload(md, f"{i}".encode())))

    def publish(self) -> None:
        self._append()
        waiters, self._waiters = self._waiters, []
        for fut in waiters:  # as ManagedLedger wakes its waiters: each waiting task is scheduled directly
            if not fut.done():
                fut.set_result(None)

    async def _arrival(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def has_more_entries(self) -> bool:
        return self.read_position[1] < len(self.entries)

    async def read_entries(self, n: int):
        began_at = self.read_position  # (the real cursor awaits the bookies here; a cache hit does not)
        out = self.entries[began_at[1]:began_at[1] + n]
        if self.read_position == began_at and out:
            self.read_position = (1, out[-1].position[1] + 1)
        return out

    async def wait_for_entries(self) -> None:
        while not self.has_more_entries():
            await self._arrival()

    async def read_entries_or_wait(self, n: int):
        while True:
            out = await self.read_entries(n)
            if out:
                return out
            await self._arrival()

    def is_deleted(self, position) -> bool:
        return position <= self.mark_delete_position

    def rewind(self) -> None:
        self.read_position = (1, self.mark_delete_position[1] + 1)


class Subscription:
    name = "sub"

    def __init__(self, cursor):
        self.cursor = cursor

    def ack_set_for(self, entry):
        return None

    def record_out(self, entries) -> None:
        pass


class Connection:
    """Fails the first ``failures`` sends, then records what was sent."""

    writable = True

    def __init__(self, failures: int):
        self.failures = failures
        self.sent: list = []
        self.out = self  # the consumer writes through connection.out

    def message(self, consumer_id, position, data, redelivery_count, ack_set, partition) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("scripted failure while sending")
        self.sent.append(position)


async def test_a_failure_while_dispatching_does_not_end_delivery():
    cursor = Cursor(5)
    dispatcher = SingleActiveConsumerDispatcher(Subscription(cursor), max_read_batch_size=10)
    conn = Connection(failures=1)
    consumer = Consumer(1, "c", conn, track_pending_acks=False)
    consumer.flow(100)
    dispatcher.add_consumer(consumer)
    try:
        await wait_until_async(lambda: len(conn.sent) >= 5, 5, lambda: f"all 5 entries; sent {conn.sent}")
    finally:
        await dispatcher.close()
    assert conn.sent == [(1, i) for i in range(5)]  # read again from the start after the failure, in order


async def test_a_publish_as_the_active_consumer_leaves_loses_no_entry():
    """The shedding test's lost batch, scripted: the loop waits at the tail for consumer A; in one step A
    leaves (a rewind is scheduled) and an entry is published. The rewind runs first; a read in a task of its
    own then started at the rewound position, moved the cursor past the whole backlog, and the cancelled loop
    dropped what it read, so the next consumer started after it."""
    cursor = Cursor(5)
    dispatcher = SingleActiveConsumerDispatcher(Subscription(cursor), max_read_batch_size=100)
    first, second = Connection(failures=0), Connection(failures=0)
    a = Consumer(1, "a", first, track_pending_acks=False)
    a.flow(100)
    dispatcher.add_consumer(a)
    try:
        await wait_until_async(lambda: len(first.sent) == 5, 5, lambda: "A to get the backlog")
        await asyncio.sleep(0)  # the loop is now waiting at the tail
        waiting_loop = dispatcher._task
        dispatcher.remove_consumer(a)  # schedules the rewind: nothing A had was acknowledged
        cursor.publish()
        await wait_until_async(lambda: dispatcher._task not in (None, waiting_loop), 5,
                               lambda: "the loop to restart after the rewind")
        b = Consumer(2, "b", second, track_pending_acks=False)
        b.flow(100)
        dispatcher.add_consumer(b)
        await wait_until_async(lambda: len(second.sent) >= 6, 5, lambda: f"B to get entries 0..5; it got {second.sent}")
    finally:
        await dispatcher.close()
    assert second.sent == [(1, i) for i in range(6)]


def test_reads_are_bounded_by_bytes_at_the_recent_entry_size():
    dispatcher = SingleActiveConsumerDispatcher(Subscription(Cursor(5)), max_read_batch_size=100)
    dispatcher.max_read_bytes = 10 * 1024 * 1024
    assert dispatcher.bounded_by_bytes(100) == 100  # nothing read yet: no estimate
    dispatcher._note_sizes([SimpleNamespace(data=b"x" * (5 * 1024 * 1024))] * 3)
    assert dispatcher.bounded_by_bytes(100) == 2  # two 5 MiB entries fill 10 MiB
    dispatcher._note_sizes([SimpleNamespace(data=b"x" * 100)] * 50)
    assert dispatcher.bounded_by_bytes(100) == 100  # small entries again: the count bound applies
    dispatcher.max_read_bytes = 1
    assert dispatcher.bounded_by_bytes(100) == 1  # always at least one entry


class FencedCursor(Cursor):
    """A cursor whose managed ledger fenced itself: every read fails, as ManagedCursor's do then."""

    def __init__(self, count: int):
        super().__init__(count)
        self.ml = SimpleNamespace(state=ManagedLedgerState.FENCED)
        self.reads = 0

    async def read_entries(self, n: int):
        self.reads += 1
        raise ManagedLedgerFencedError("t is fenced: the cursor node changed under us")


@pytest.mark.parametrize("kind", [SingleActiveConsumerDispatcher, SharedDispatcher])
async def test_seed1_partition_broker_fenced_ledger_closes_the_topic_instead_of_retrying_reads(kind):
    """Seed 1, partition-broker: after the managed ledger fenced itself, the Shared and Key_Shared loops retried
    reads on the closed cursor every 100 ms for as long as the broker ran, and their consumers got nothing.
    The loop must hand the topic to ``fenced`` (which closes it, so clients look it up again) and end."""
    cursor = FencedCursor(5)
    subscription = Subscription(cursor)
    closed_with: list[BaseException] = []
    subscription.topic = SimpleNamespace(fenced=closed_with.append, terminated=False, limit=lambda name: 0)
    dispatcher = kind(subscription, max_read_batch_size=10)
    consumer = Consumer(1, "c", Connection(failures=0), track_pending_acks=False)
    consumer.flow(100)
    dispatcher.add_consumer(consumer)
    try:
        await wait_until_async(lambda: dispatcher._task is not None and dispatcher._task.done(), 5,
                               lambda: f"the loop to end; it read {cursor.reads} times")
    finally:
        await dispatcher.close()
    assert cursor.reads == 1
    assert len(closed_with) == 1 and isinstance(closed_with[0], ManagedLedgerFencedError)
