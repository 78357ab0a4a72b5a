"""The dispatch loop outlives a failure: an unexpected error while handing entries out is logged, the cursor
rewinds, and delivery goes on (a loop that died was a silent stall of the whole subscription)."""

from __future__ import annotations

import asyncio

from broker.subscriptions.consumer import Consumer
from broker.subscriptions.single_active import SingleActiveConsumerDispatcher
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import encode_headers_and_payload


class Entry:
    def __init__(self, position, data):
        self.position, self.data = position, data


class Cursor:
    """Just enough of ManagedCursor: a list of entries, a read position, rewind."""

    def __init__(self, count: int):
        md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        self.entries = [Entry((1, i), encode_headers_and_payload(md, f"{i}".encode())) for i in range(count)]
        self.read_position = (1, 0)
        self.mark_delete_position = (1, -1)
        self.more = asyncio.Event()

    def has_more_entries(self) -> bool:
        return self.read_position[1] < len(self.entries)

    async def read_entries(self, n: int):
        start = self.read_position[1]
        out = self.entries[start:start + n]
        self.read_position = (1, start + len(out))
        return out

    async def read_entries_or_wait(self, n: int):
        while not self.has_more_entries():
            await self.more.wait()
        return await self.read_entries(n)

    def is_deleted(self, position) -> bool:
        return False

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

    def send_message(self, consumer_id, position, data, redelivery_count, ack_set, partition) -> None:
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
        async with asyncio.timeout(5):
            while len(conn.sent) < 5:
                await asyncio.sleep(0.01)  # polling the recorded sends of a loop that runs on its own
    finally:
        await dispatcher.close()
    assert conn.sent == [(1, i) for i in range(5)]  # read again from the start after the failure, in order
