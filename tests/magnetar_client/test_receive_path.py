"""The consumer's receive path without a broker: MESSAGE frames go in through Connection.data_received, messages
come out of receive() / batch_receive() / receive_entries(). Covers what a batch entry may hold (batch-index
acks, a reader's start inside a batch, compression, chunks) and the queue's hand-offs (permits, waiters)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.asyncio.connection import Connection
from magnetar.asyncio.consumer import AsyncConsumer, _bitset
from magnetar.compression import CompressionType, compress
from magnetar.errors import Timeout
from magnetar.message import MessageId, ReceivedEntry
from magnetar.protocol import FrameDecoder, pb
from magnetar.protocol.frames import command, encode_payload_command, pack_batch

T = pb.BaseCommand
TOPIC = "persistent://public/default/receive-path"


class RecordingTransport:
    def __init__(self):
        self.decoder = FrameDecoder()
        self.commands: list[pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        self.commands += [frame.command for frame in self.decoder.feed(data)]

    def close(self) -> None:
        pass

    def permits(self) -> int:
        return sum(c.flow.messagePermits for c in self.commands if c.type == T.FLOW)


class OneConsumerClient:
    def next_handler_id(self) -> int:
        return 7


def make_consumer(queue_size: int = 1000, **options) -> tuple[AsyncConsumer, Connection, RecordingTransport]:
    conn = Connection("127.0.0.1:1", 5)
    conn.transport = transport = RecordingTransport()
    consumer = AsyncConsumer(OneConsumerClient(), TOPIC, "s", receiver_queue_size=queue_size, **options)
    consumer.conn = conn
    conn.consumers[consumer.consumer_id] = consumer
    return consumer, conn, transport


def batch_frame(entry: int, count: int, *, ledger: int = 3, ack_set=(), compression=CompressionType.NONE,
                with_fields: bool = True) -> bytes:
    """An entry holding a producer batch of ``count`` messages b"m<i>", key k<i>, event time 1000+i, property i=<i>."""
    singles = []
    for i in range(count):
        smm = pb.SingleMessageMetadata(sequence_id=i)
        if with_fields:
            smm.partition_key, smm.event_time = f"k{i}", 1000 + i
            smm.properties.add(key="i", value=str(i))
        singles.append((smm, b"m%d" % i))
    raw = pack_batch(singles)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_000,
                            num_messages_in_batch=count, compression=compression, uncompressed_size=len(raw))
    msg = pb.CommandMessage(consumer_id=7, message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry),
                            ack_set=list(ack_set))
    return encode_payload_command(command(T.MESSAGE, message=msg), md, compress(compression, raw))


def single_frame(entry: int, payload: bytes, *, ledger: int = 3, **metadata) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=entry, publish_time=1_700_000_000_000, **metadata)
    msg = pb.CommandMessage(consumer_id=7, message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry))
    return encode_payload_command(command(T.MESSAGE, message=msg), md, payload)


async def drain(consumer: AsyncConsumer) -> list:
    out = []
    while consumer.has_queued():
        out.append(await consumer.receive(0))
    return out


async def test_a_batch_comes_out_in_order_with_each_message_s_fields():
    consumer, conn, _ = make_consumer()
    conn.data_received(batch_frame(5, 4))
    got = await drain(consumer)
    assert [m.data() for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.message_id() for m in got] == [MessageId(-1, 3, 5, i, 4) for i in range(4)]
    assert [m.message_id().batch_size() for m in got] == [4] * 4
    assert [(m.partition_key(), m.event_timestamp(), m.properties()) for m in got] == [
        (f"k{i}", 1000 + i, {"i": str(i)}) for i in range(4)]
    assert {m.publish_timestamp() for m in got} == {1_700_000_000_000}


async def test_indexes_the_broker_marks_acknowledged_are_skipped_and_the_rest_keep_their_ids():
    consumer, conn, _ = make_consumer()
    conn.data_received(batch_frame(5, 70, ack_set=_bitset({1, 3, 64, 69}, 70)))  # only these are unacknowledged
    got = await drain(consumer)
    assert [m.message_id().batch_index() for m in got] == [1, 3, 64, 69]
    assert [m.data() for m in got] == [b"m1", b"m3", b"m64", b"m69"]
    assert {m.message_id().batch_size() for m in got} == {70}


@pytest.mark.parametrize("inclusive, first", [(True, 2), (False, 3)])
async def test_a_reader_starting_inside_a_batch_drops_what_lies_before_its_start(inclusive, first):
    consumer, conn, _ = make_consumer(durable=False, start_message_id=MessageId(-1, 3, 5, 2, 6),
                                      start_message_id_inclusive=inclusive)
    consumer._start = (consumer.start_message_id, inclusive)
    conn.data_received(batch_frame(4, 6))  # an entry before the start: dropped whole
    conn.data_received(batch_frame(5, 6))
    conn.data_received(batch_frame(6, 2))
    got = [(m.message_id().entry_id(), m.message_id().batch_index()) for m in await drain(consumer)]
    assert got == [(5, i) for i in range(first, 6)] + [(6, 0), (6, 1)]


@pytest.mark.parametrize("inclusive", [True, False])
async def test_a_reader_starting_at_an_unbatched_message(inclusive):
    consumer, conn, _ = make_consumer(durable=False, start_message_id=MessageId(-1, 3, 5), start_message_id_inclusive=inclusive)
    consumer._start = (consumer.start_message_id, inclusive)
    for entry in (4, 5, 6):
        conn.data_received(single_frame(entry, b"e%d" % entry))
    assert [m.data() for m in await drain(consumer)] == ([b"e5"] if inclusive else []) + [b"e6"]


@pytest.mark.parametrize("kind", [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY])
async def test_a_compressed_batch_is_unpacked_after_decompression(kind):
    consumer, conn, _ = make_consumer()
    conn.data_received(batch_frame(5, 50, compression=kind))
    assert [m.data() for m in await drain(consumer)] == [b"m%d" % i for i in range(50)]


async def test_chunks_become_one_message_that_acknowledges_the_earlier_chunks():
    consumer, conn, transport = make_consumer(ack_group_time_ms=0)
    parts = [b"aa", b"bb", b"c"]

    def chunk(entry, chunk_id):
        return single_frame(entry, parts[chunk_id], uuid="u1", chunk_id=chunk_id, num_chunks_from_msg=3,
                            total_chunk_msg_size=5)

    conn.data_received(chunk(10, 0))
    conn.data_received(chunk(11, 1))
    conn.data_received(chunk(12, 0))  # redelivered from the start: the message starts over
    assert not consumer.has_queued()
    conn.data_received(chunk(13, 1))
    conn.data_received(chunk(14, 2))
    [msg] = await drain(consumer)
    assert msg.data() == b"aabbc" and msg.message_id() == MessageId(-1, 3, 14, -1)
    assert list(msg.chunks) == [(3, 12), (3, 13)]
    await consumer.acknowledge(msg)
    acked = [(i.ledgerId, i.entryId) for c in transport.commands if c.type == T.ACK for i in c.ack.message_id]
    assert acked == [(3, 12), (3, 13), (3, 14)]


async def test_receive_entries_hands_over_what_receive_left_of_an_entry():
    consumer, conn, _ = make_consumer()
    conn.data_received(batch_frame(5, 10))
    conn.data_received(batch_frame(6, 10))
    conn.data_received(batch_frame(7, 10))
    first = [await consumer.receive(0) for _ in range(3)]
    entries = await consumer.receive_entries(max_messages=8, timeout_millis=0)  # whole entries, at least 8 messages
    assert [m.message_id().batch_index() for m in first] == [0, 1, 2]
    assert [(e.entry_id, list(e.indexes)) for e in entries] == [(5, list(range(3, 10))), (6, list(range(10)))]
    assert consumer._last_dequeued == MessageId(-1, 3, 6, 9, 10)
    rest = await consumer.batch_receive(max_messages=100, timeout_millis=0)
    assert [m.message_id() for m in rest] == [MessageId(-1, 3, 7, i, 10) for i in range(10)]


async def test_once_read_by_entries_whole_batches_are_queued_unsplit_and_give_the_same_messages():
    frames = [batch_frame(5, 4), batch_frame(6, 3, with_fields=False),
              batch_frame(7, 70, ack_set=_bitset({1, 3, 64, 69}, 70)),  # partly acknowledged: split as before
              single_frame(8, b"e8"), batch_frame(9, 50, compression=CompressionType.LZ4)]
    by_message, conn, _ = make_consumer()
    for frame in frames:
        conn.data_received(frame)
    expected = await drain(by_message)
    consumer, conn, _ = make_consumer()
    conn.data_received(batch_frame(4, 2))
    assert (await consumer.receive_entries(timeout_millis=0))[0].layout is None  # queued before the first call
    for frame in frames:
        conn.data_received(frame)
    entries = await consumer.receive_entries(max_messages=1000, timeout_millis=0)
    assert [(e.entry_id, e.layout is not None) for e in entries] == [(5, True), (6, True), (7, False), (8, False),
                                                                    (9, True)]
    assert sorted(entries[0].layout.rich) == [0, 1, 2, 3] and entries[1].layout.rich == {}
    got = [e.message(i) for e in entries for i in range(len(e))]
    fields = lambda m: (m.data(), m.message_id(), m.partition_key(), m.event_timestamp(), m.properties())  # noqa: E731
    assert [fields(m) for m in got] == [fields(m) for m in expected]
    assert len(got) == 4 + 3 + 4 + 1 + 50


async def test_permits_are_granted_again_for_every_message_handed_out():
    consumer, conn, transport = make_consumer(queue_size=10)
    for entry in range(6):
        conn.data_received(batch_frame(entry, 4))
    await consumer.receive(0)
    await consumer.receive(0)
    await consumer.receive(0)
    assert transport.permits() == 0  # fewer than half the queue handed out
    await consumer.receive_entries(max_messages=5, timeout_millis=0)  # 1 + 4 messages: 8 handed out in all
    assert transport.permits() == 8
    await drain(consumer)  # 16 more: granted 5 at a time, the last one waits for the next 4
    assert transport.permits() == 8 + 15 and not consumer.has_queued()


async def test_a_waiting_receive_gets_the_next_entry_even_after_the_queue_was_dropped():
    consumer, conn, _ = make_consumer()
    waiting = asyncio.ensure_future(consumer.receive(5_000))
    waiting_too = asyncio.ensure_future(consumer.receive_entries(timeout_millis=5_000))
    await asyncio.sleep(0)  # both are now parked on the queue
    consumer._drop_queued()
    conn.data_received(batch_frame(5, 3))
    msg, entries = await asyncio.gather(waiting, waiting_too)
    assert msg.data() == b"m0"
    assert [list(e.indexes) for e in entries] == [[1, 2]]
    assert not consumer._waiters


async def test_receive_times_out_and_forgets_its_waiter():
    consumer, conn, _ = make_consumer()
    with pytest.raises(Timeout):
        await consumer.receive(20)
    with pytest.raises(Timeout):
        await consumer.receive_entries(timeout_millis=0)
    assert not consumer._waiters
    conn.data_received(batch_frame(5, 1))
    assert (await consumer.receive(0)).data() == b"m0"


@pytest.mark.parametrize("partition", [-1, 0, 12])
@pytest.mark.parametrize("ledger, entry", [(3, 5), (0, 0), ((1 << 62) + 1, 1 << 40)])
def test_entry_columns_match_what_each_message_gives(partition, ledger, entry):
    singles = []
    for i in range(70):
        smm = pb.SingleMessageMetadata(payload_size=1, partition_key=f"k{i}" if i % 2 else "", event_time=i * 3)
        if i % 3:
            smm.properties.add(key="a", value=str(i))
            smm.properties.add(key="b", value="x")
        singles.append(smm)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5, num_messages_in_batch=70)
    kept = [i for i in range(70) if i % 5]  # as if some were acknowledged already
    batched = ReceivedEntry(TOPIC, partition, ledger, entry, 70, md, 0, kept, [singles[i] for i in kept],
                            [b"%d" % i for i in kept])
    unbatched = ReceivedEntry(TOPIC, partition, ledger, entry, 0, pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=5, partition_key="solo", event_time=9,
        properties=[pb.KeyValue(key="c", value="d")]), 0, [-1], [None], [b"solo"])
    for received in (batched, unbatched):
        messages = received.messages()
        assert received.serialized_message_ids() == [m.message_id().serialize() for m in messages]
        assert received.message_ids() == [m.message_id() for m in messages]
        assert [MessageId.deserialize(b) for b in received.serialized_message_ids()] == received.message_ids()
        assert received.partition_keys() == [m.partition_key() for m in messages]
        assert received.event_timestamps() == [m.event_timestamp() for m in messages]
        assert received.properties() == [m.properties() for m in messages]
        assert received.payloads == [m.data() for m in messages]
        tail = received.tail(1)
        assert tail.messages()[0].message_id() == messages[1].message_id() if len(messages) > 1 else not len(tail)
