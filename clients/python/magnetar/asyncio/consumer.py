"""Consumer: receiver queue with flow permits, acks (individual, cumulative, batch index), negative acks, seek.

How it works: on subscribe the consumer grants ``receiver_queue_size`` permits
(FLOW); each message handed to the application frees a slot, and permits are
granted again in chunks of half the queue, as the official client does. A batch
entry is unpacked in one pass into a ReceivedEntry (skipping indexes the broker
marks as already acknowledged) and queued whole; ``receive()`` makes a Message
per message it hands out, ``receive_entries()`` hands out the entries. Acknowledging one message of a batch
sends a batch-index ack (the bitset of messages still unacknowledged), so the
broker keeps the rest. A negative ack asks for redelivery after
``negative_ack_redelivery_delay_ms``. When the broker closes the consumer (seek,
topic unloaded) or the connection drops, the consumer subscribes again and
drops what was queued but not yet received (the broker sends it again).
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import enum
import logging
import sys
import uuid

from magnetar.asyncio import dead_letter
from magnetar.asyncio.dead_letter import DeadLetterPolicy, LetterProducers
from magnetar.asyncio.schemas import SchemaReader
from magnetar.compression import CompressionError, decompress
from magnetar.errors import AlreadyClosed, InvalidConfiguration, InvalidMessage, MagnetarError, Timeout
from magnetar.message import Message, MessageId, ReceivedEntry
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.batch_layout import scan_batch
from magnetar.protocol.frames import split_batch

log = logging.getLogger(__name__)
T = pb.BaseCommand
_KEEP_NONE = sys.maxsize  # _first_kept_index(): no message of the entry is kept


class ConsumerType(enum.IntEnum):
    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class InitialPosition(enum.IntEnum):
    Latest = 0
    Earliest = 1


class AsyncConsumer:
    def __init__(self, client, topic: str, subscription_name: str, *, consumer_type=ConsumerType.Exclusive,
                 initial_position=InitialPosition.Latest, receiver_queue_size: int = 1000, consumer_name=None,
                 negative_ack_redelivery_delay_ms: int = 60_000, durable: bool = True,
                 start_message_id: MessageId | None = None, start_message_id_inclusive: bool = False,
                 priority_level: int = 0, partition: int = -1, unacked_messages_timeout_ms: int | None = None,
                 dead_letter_policy: DeadLetterPolicy | None = None, ack_group_time_ms: int = 100,
                 retry_enable: bool = False, schema=None, is_read_compacted: bool = False):
        self.client = client
        self.read_compacted = bool(is_read_compacted)  # read the topic's compacted view up to its horizon
        # Once read through receive_entries, batches are queued unsplit (ReceivedEntry.layout): a columnar
        # reader never needs a SingleMessageMetadata object for a message without key, properties or event time.
        self._keep_layout = False
        self._topic = topic
        self.schema = schema  # a magnetar.schema.Schema declared in SUBSCRIBE and used by Message.value()
        self._schema_reader = SchemaReader(client, schema) if schema is not None else None
        self._subscription = subscription_name
        self.consumer_type = ConsumerType(consumer_type)
        self.initial_position = InitialPosition(initial_position)
        self.queue_size = max(1, receiver_queue_size)
        self._name = consumer_name or uuid.uuid4().hex[:10]
        self.nack_delay_s = negative_ack_redelivery_delay_ms / 1000
        self.durable = durable
        self.start_message_id = start_message_id
        self.start_inclusive = start_message_id_inclusive
        self.priority_level = priority_level
        self.partition = partition
        self.ack_timeout_s = unacked_messages_timeout_ms / 1000 if unacked_messages_timeout_ms else None
        if retry_enable and (dead_letter_policy is None or not dead_letter_policy.retry_letter_topic):
            raise InvalidConfiguration("retry_enable needs a dead-letter policy naming the retry-letter topic "
                                       "(Client.subscribe fills in the defaults)")
        self.dead_letter = dead_letter_policy
        self.retry_enable = retry_enable
        self._letters = LetterProducers(client)
        self._unacked: dict[tuple, tuple[float, Message]] = {}  # (ledger, entry, index) -> (received at, message)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._chunks: dict[str, list] = {}  # uuid -> [(payload, ledger, entry)] of a chunked message in progress
        self._listener_task: asyncio.Task | None = None
        self.ack_group_time_s = ack_group_time_ms / 1000
        self._ack_group: list = []
        self._ack_timer_group: asyncio.TimerHandle | None = None
        self.consumer_id = client.next_handler_id()
        self.conn = None
        # The receiver queue: entries as received; the first _head_taken messages of the first entry are gone.
        self._entries: collections.deque[ReceivedEntry] = collections.deque()
        self._head_taken = 0
        self._waiters: list[asyncio.Future] = []  # receive() calls waiting for an entry
        self._flow_threshold = max(1, self.queue_size // 2)
        self._delivered_since_flow = 0
        self._batch_acks: dict[tuple, set[int]] = {}  # (ledger, entry) -> acked batch indexes
        self._last_dequeued: MessageId | None = None
        self._start: tuple[MessageId | None, bool] = (start_message_id, start_message_id_inclusive)
        self._seek_to: tuple[MessageId, bool] | None = None  # a durable consumer's last seek target
        self._reconnecting: asyncio.Task | None = None
        self._generation = 0
        self.closed = False

    # ---- lifecycle ----------------------------------------------------------------------

    async def _connect(self) -> None:
        self.conn = await self.client.connection_for(self._topic)
        self.conn.consumers[self.consumer_id] = self
        self._generation += 1
        self._drop_queued()
        self._delivered_since_flow = 0
        req = pb.CommandSubscribe(
            topic=self._topic, subscription=self._subscription, subType=int(self.consumer_type),
            consumer_id=self.consumer_id, request_id=self.conn.next_request_id(), consumer_name=self._name,
            priority_level=self.priority_level, durable=self.durable, initialPosition=int(self.initial_position))
        if self.read_compacted:
            req.read_compacted = True
        # A reader resumes after what it has handed out; the broker starts *at* the given entry.
        self._start = (self._last_dequeued, False) if self._last_dequeued is not None else (self.start_message_id, self.start_inclusive)
        if self._start[0] is not None and not self.durable:
            req.start_message_id.CopyFrom(self._start[0].to_proto())
        declared = self.schema.schema_info().to_proto() if self.schema is not None else None
        if declared is not None:
            req.schema.CopyFrom(declared)
        try:
            await self.conn.request(T.SUBSCRIBE, "subscribe", req)
        except BaseException:
            self.conn.consumers.pop(self.consumer_id, None)
            raise
        self.conn.write(T.FLOW, flow=pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=self.queue_size))

    def on_connection_lost(self, conn) -> None:
        if self.closed or conn is not self.conn:
            return
        conn.consumers.pop(self.consumer_id, None)
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        async for attempt in self.client.backoff():
            if self.closed:
                return
            try:
                await self._connect()
                return
            except MagnetarError as exc:
                if not exc.retriable:
                    log.error("consumer %s on %s cannot resubscribe: %s", self._name, self._topic, exc)
                    return
                log.info("consumer %s: resubscribe attempt %d failed: %s", self._name, attempt, exc)

    # ---- receiving ----------------------------------------------------------------------

    def on_message(self, cmd, frame) -> None:
        md = frame.metadata
        mid = cmd.message_id
        ledger, entry = mid.ledgerId, mid.entryId
        redelivery = cmd.redelivery_count
        if md is None:
            return
        payload = frame.payload
        if md.compression:
            try:
                payload = decompress(md.compression, payload, md.uncompressed_size)
            except CompressionError as exc:
                log.error("consumer %s: message %d:%d dropped: %s", self._name, ledger, entry, exc)
                self.conn.write(T.ACK, ack=pb.CommandAck(consumer_id=self.consumer_id, ack_type=pb.CommandAck.Individual,
                                                         message_id=[pb.MessageIdData(ledgerId=ledger, entryId=entry)],
                                                         validation_error=pb.CommandAck.DecompressionError))
                return
        first = self._first_kept_index(ledger, entry)
        if md.HasField("num_messages_in_batch"):  # a producer batch (even of one message)
            size = md.num_messages_in_batch
            if self._keep_layout and first <= 0 and not len(cmd.ack_set) and not self.read_compacted:
                self._enqueue(ReceivedEntry(self._topic, self.partition, ledger, entry, size, md, redelivery,
                                            range(size), None, None, layout=scan_batch(payload, size)))
                return
            singles, payloads = split_batch(payload, size)
            indexes = range(size)
            acked = _acked_indexes(cmd.ack_set, size)
            if self.read_compacted and any(s.compacted_out for s in singles):
                # A Pulsar broker's compaction leaves empty placeholders for the messages it dropped
                # (Magnetar's rewrites the batch without them).
                acked = set(acked) | {i for i, s in enumerate(singles) if s.compacted_out}
            if first > 0 or acked:  # the rare case: part of the batch was acknowledged or lies before the start
                indexes = [i for i in indexes if i >= first and i not in acked]
                singles, payloads = [singles[i] for i in indexes], [payloads[i] for i in indexes]
            if indexes:
                self._enqueue(ReceivedEntry(self._topic, self.partition, ledger, entry, size, md, redelivery,
                                            indexes, singles, payloads))
            return
        if first > -1:
            return
        chunk_ids: list[tuple[int, int]] = []
        if md.HasField("num_chunks_from_msg") and md.num_chunks_from_msg > 1:
            parts = self._chunks.setdefault(md.uuid, [])
            if md.chunk_id != len(parts):  # a chunk out of place (e.g. redelivered): start this message over
                parts.clear()
                if md.chunk_id != 0:
                    return
            parts.append((payload, ledger, entry))
            if md.chunk_id < md.num_chunks_from_msg - 1:
                return
            del self._chunks[md.uuid]
            payload = b"".join(p for p, _, _ in parts)
            chunk_ids = [(l, e) for _, l, e in parts[:-1]]
        self._enqueue(ReceivedEntry(self._topic, self.partition, ledger, entry, 0, md, redelivery, [-1], [None],
                                    [payload], chunk_ids))

    def _first_kept_index(self, ledger: int, entry: int) -> int:
        """Messages of this entry with a batch index below the answer are dropped: -1 keeps all of it (a message
        sent without batching has index -1), _KEEP_NONE none. A reader drops what lies before its start id (and
        the start itself unless inclusive); after a seek to a message id, a consumer drops up to and including
        that id, as the official clients do."""
        start, inclusive = self._seek_to if self._seek_to is not None else ((None, False) if self.durable else self._start)
        if start is None or start.ledger_id() < 0 or start.ledger_id() >= (1 << 63) - 1:
            return -1
        here, mark = (ledger, entry), (start.ledger_id(), start.entry_id())
        if here != mark:
            return _KEEP_NONE if here < mark else -1
        if start.batch_index() < 0:
            return -1 if inclusive else _KEEP_NONE
        return start.batch_index() if inclusive else start.batch_index() + 1

    def _enqueue(self, entry: ReceivedEntry) -> None:
        self._entries.append(entry)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def _wait_for_messages(self, timeout_millis: int | None) -> None:
        """Return once a message is queued; raises Timeout after ``timeout_millis``. Every waiter is woken by
        the next entry and checks again, so concurrent receive() calls and _drop_queued() are safe."""
        if self.closed:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None if timeout_millis is None else timeout_millis / 1000):
                while not self._entries:
                    waiter = loop.create_future()
                    self._waiters.append(waiter)
                    try:
                        await waiter
                    finally:
                        if waiter in self._waiters:  # timed out or cancelled (a woken waiter was cleared)
                            self._waiters.remove(waiter)
        except TimeoutError as exc:
            raise Timeout(f"no message within {timeout_millis} ms") from exc

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_millis``."""
        if not self._entries or self.closed:  # under load a message is queued: no waiting, no timer
            await self._wait_for_messages(timeout_millis)
        msg = self._take_message()
        if self._schema_reader is not None:
            await self._schema_reader.attach(msg)
        return msg

    def _take_message(self) -> Message:
        entry = self._entries[0]
        msg = entry.message(self._head_taken)
        self._head_taken += 1
        if self._head_taken == len(entry.payloads):
            self._entries.popleft()
            self._head_taken = 0
        self._last_dequeued = msg.message_id()
        if self.ack_timeout_s is not None:
            self._track_unacked(msg)
        self._delivered_since_flow += 1
        if self._delivered_since_flow >= self._flow_threshold:
            self._grant_permits()
        return msg

    def _track_unacked(self, msg: Message) -> None:
        self._unacked[msg.message_id()._key()] = (asyncio.get_running_loop().time(), msg)
        if self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(self.ack_timeout_s / 2, self._check_ack_timeouts)

    def _grant_permits(self) -> None:
        """Grant the broker permits again once half the receiver queue has been handed out."""
        if self._delivered_since_flow >= self._flow_threshold and self.conn is not None and not self.conn.closed:
            self.conn.write(T.FLOW, flow=pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=self._delivered_since_flow))
            self._delivered_since_flow = 0

    async def batch_receive(self, max_messages: int = 100, timeout_millis: int = 100) -> list[Message]:
        out = [await self.receive(timeout_millis=None if timeout_millis is None else timeout_millis)]
        while len(out) < max_messages and self._entries:
            out.append(self._take_message())
            if self._schema_reader is not None:
                await self._schema_reader.attach(out[-1])
        return out

    async def receive_entries(self, max_messages: int = 1000, timeout_millis: int | None = None) -> list[ReceivedEntry]:
        """What is queued as whole entries (magnetar's own bulk read, not in pulsar-client): at least one message,
        then whole entries while fewer than ``max_messages`` are taken. Each message counts as received, exactly
        as with receive(); the entries give their messages' fields as columns. Raises Timeout."""
        self._keep_layout = True
        await self._wait_for_messages(timeout_millis)
        out, count = [], 0
        while self._entries and count < max_messages:
            entry = self._entries.popleft()
            if self._head_taken:  # some of it went out through receive()
                entry, self._head_taken = entry.tail(self._head_taken), 0
            out.append(entry)
            count += len(entry)
        last = out[-1]
        self._last_dequeued = MessageId(last.partition, last.ledger_id, last.entry_id, last.indexes[-1], last.batch_size)
        if self.ack_timeout_s is not None:
            for entry in out:
                for msg in entry.messages():
                    self._track_unacked(msg)
        self._delivered_since_flow += count
        self._grant_permits()
        return out

    def _drop_queued(self) -> None:
        """Forget what was queued but not received (the broker sends it again). A receive() already waiting
        still gets the next message."""
        self._entries.clear()
        self._head_taken = 0

    def has_queued(self) -> bool:
        return bool(self._entries)

    # ---- acknowledging --------------------------------------------------------------------

    def _id_of(self, msg_or_id) -> MessageId:
        return msg_or_id.message_id() if isinstance(msg_or_id, Message) else msg_or_id

    def _check_ack_timeouts(self) -> None:
        """Redeliver messages received more than the ack timeout ago and not acknowledged (Pulsar's ack timeout)."""
        self._ack_timer = None
        if self.closed:
            return
        now = asyncio.get_running_loop().time()
        expired = [msg for at, msg in self._unacked.values() if now - at >= self.ack_timeout_s]
        for msg in expired:
            self._unacked.pop(msg.message_id()._key(), None)
        if expired:
            self._redeliver(expired)
        if self._unacked:
            self._ack_timer = asyncio.get_running_loop().call_later(self.ack_timeout_s / 2, self._check_ack_timeouts)

    def _redeliver(self, messages: list[Message]) -> None:
        """Ask for these messages again -- or, past the dead-letter policy's count, move them to the DLQ topic."""
        again = []
        for msg in messages:
            if self.dead_letter is not None and msg.redelivery_count() >= self.dead_letter.max_redeliver_count:
                asyncio.get_running_loop().create_task(self._to_dead_letter(msg))
            else:
                again.append(msg.message_id())
        if again and self.conn is not None and not self.conn.closed:
            ids = sorted({(m.ledger_id(), m.entry_id()) for m in again})
            self.conn.write(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                consumer_id=self.consumer_id, message_ids=[pb.MessageIdData(ledgerId=l, entryId=e) for l, e in ids]))

    async def _to_dead_letter(self, msg: Message) -> None:
        topic = dead_letter.dead_letter_topic(self.dead_letter, self._topic, self._subscription)
        try:
            props = dead_letter.origin_properties(msg.properties(), self._topic, dead_letter.origin_message_id(msg.message_id()))
            await self._letters.send(topic, msg, props)
            await self.acknowledge(msg)
        except MagnetarError as exc:
            log.warning("consumer %s: moving %s to %s failed (%s); it will be redelivered", self._name,
                        msg.message_id(), topic, exc)

    async def reconsume_later(self, msg: Message, delay: datetime.timedelta,
                              properties: dict[str, str] | None = None) -> None:
        """Have ``msg`` delivered again after ``delay``, through the retry-letter topic (see dead_letter.py);
        past the policy's ``max_redeliver_count`` reconsumes it goes to the dead-letter topic instead.
        The original is acknowledged once the copy is stored.

        Raises InvalidConfiguration unless subscribed with ``retry_enable=True``, ValueError for a delay that
        is not a non-negative timedelta, InvalidMessage when ``msg`` carries a malformed RECONSUMETIMES. When
        publishing fails the error is raised and ``msg`` is redelivered.
        """
        if self.closed:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        if not self.retry_enable:
            raise InvalidConfiguration(f"reconsume_later needs subscribe(..., retry_enable=True) ({self._topic})")
        if not isinstance(delay, datetime.timedelta) or delay < datetime.timedelta(0):
            raise ValueError(f"delay must be a non-negative datetime.timedelta, got {delay!r}")
        delay_ms = int(delay.total_seconds() * 1000)
        try:
            props, times = dead_letter.reconsume_properties(msg.properties(), self._topic, dead_letter.origin_message_id(msg.message_id()),
                                                            delay_ms, properties)
        except ValueError as exc:
            raise InvalidMessage(str(exc)) from exc
        policy = self.dead_letter
        try:
            if dead_letter.reconsume_goes_to_dead_letter(times, policy):
                await self._letters.send(policy.dead_letter_topic, msg, props)
            else:
                await self._letters.send(policy.retry_letter_topic, msg, props, delay_ms)
        except MagnetarError:
            self._unacked.pop(msg.message_id()._key(), None)
            self._redeliver([msg])
            raise
        await self.acknowledge(msg)

    async def acknowledge(self, msg_or_id) -> None:
        mid = self._id_of(msg_or_id)
        self._unacked.pop(mid._key(), None)
        for ledger, entry in getattr(msg_or_id, "chunks", None) or ():
            self._send_ack(pb.CommandAck.Individual, pb.MessageIdData(ledgerId=ledger, entryId=entry))
        data = pb.MessageIdData(ledgerId=mid.ledger_id(), entryId=mid.entry_id())
        if mid.batch_index() >= 0 and mid.batch_size() > 1:
            acked = self._batch_acks.setdefault((mid.ledger_id(), mid.entry_id()), set())
            acked.add(mid.batch_index())
            remaining = set(range(mid.batch_size())) - acked
            if remaining:
                data.ack_set.extend(_bitset(remaining, mid.batch_size()))
                data.batch_size = mid.batch_size()
            else:
                del self._batch_acks[(mid.ledger_id(), mid.entry_id())]
        self._send_ack(pb.CommandAck.Individual, data)

    async def acknowledge_cumulative(self, msg_or_id) -> None:
        mid = self._id_of(msg_or_id)
        data = pb.MessageIdData(ledgerId=mid.ledger_id(), entryId=mid.entry_id())
        if mid.batch_index() >= 0 and mid.batch_size() > 1 and mid.batch_index() < mid.batch_size() - 1:
            data.ack_set.extend(_bitset(set(range(mid.batch_index() + 1, mid.batch_size())), mid.batch_size()))
            data.batch_size = mid.batch_size()
        self._send_ack(pb.CommandAck.Cumulative, data)

    def _send_ack(self, ack_type, data) -> None:
        """Individual acks are grouped for ``ack_group_time_ms`` (up to 1,000 ids per ACK), as the official
        client does; a cumulative ack flushes the group and goes at once."""
        if self.closed:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        if ack_type == pb.CommandAck.Individual and self.ack_group_time_s > 0:
            self._ack_group.append(data)
            if len(self._ack_group) >= 1000:
                self._flush_acks()
            elif self._ack_timer_group is None:
                self._ack_timer_group = asyncio.get_running_loop().call_later(self.ack_group_time_s, self._flush_acks)
            return
        self._flush_acks()
        self._write_ack(ack_type, [data])

    def _flush_acks(self) -> None:
        if self._ack_timer_group is not None:
            self._ack_timer_group.cancel()
            self._ack_timer_group = None
        group, self._ack_group = self._ack_group, []
        if group:
            self._write_ack(pb.CommandAck.Individual, group)

    def _write_ack(self, ack_type, ids) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.write(T.ACK, ack=pb.CommandAck(consumer_id=self.consumer_id, ack_type=ack_type, message_id=ids))

    def negative_acknowledge(self, msg: Message) -> None:
        """Ask for ``msg`` again after ``negative_ack_redelivery_delay_ms`` (or dead-letter it per the policy)."""
        self._unacked.pop(msg.message_id()._key(), None)
        generation = self._generation

        def redeliver():
            if not self.closed and generation == self._generation:
                self._redeliver([msg])

        asyncio.get_running_loop().call_later(self.nack_delay_s, redeliver)

    async def redeliver_unacknowledged_messages(self) -> None:
        self._drop_queued()
        self.conn.write(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
            consumer_id=self.consumer_id))

    # ---- position ---------------------------------------------------------------------------

    async def seek(self, target) -> None:
        """Seek to a MessageId or a publish time (ms); the broker closes us and we resubscribe.

        The broker closes the consumer before it answers, so by the answer the resubscription has begun and
        has dropped what was queued (``_connect``); what arrives after that is from the new position. Only
        when no resubscription started yet is the queue dropped here. As in the official clients, the
        message at a sought id is skipped unless the reader was made with ``start_message_id_inclusive``.
        """
        if self._reconnecting is not None and not self._reconnecting.done():
            await asyncio.shield(self._reconnecting)  # e.g. still subscribing again after the previous seek
        req = pb.CommandSeek(consumer_id=self.consumer_id, request_id=self.conn.next_request_id())
        if isinstance(target, MessageId):
            req.message_id.CopyFrom(target.to_proto())
            if self.durable:
                self._seek_to = (target, False)
            else:
                self.start_message_id, self._last_dequeued = target, None
        else:
            req.message_publish_time = int(target)
            self._seek_to = None
            if not self.durable:  # no id to filter by: start where the broker puts the cursor
                self.start_message_id, self._last_dequeued = None, None
        generation = self._generation
        await self.conn.request(T.SEEK, "seek", req)
        if generation == self._generation:
            self._drop_queued()

    async def get_last_message_id(self) -> MessageId:
        resp = await self.conn.request(T.GET_LAST_MESSAGE_ID, "getLastMessageId",
                                       pb.CommandGetLastMessageId(consumer_id=self.consumer_id, request_id=self.conn.next_request_id()))
        return MessageId.from_proto(resp.last_message_id)

    async def unsubscribe(self) -> None:
        await self.conn.request(T.UNSUBSCRIBE, "unsubscribe",
                                pb.CommandUnsubscribe(consumer_id=self.consumer_id, request_id=self.conn.next_request_id()))
        self.closed = True
        self.conn.consumers.pop(self.consumer_id, None)

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._name

    def start_listener(self, call, executor=None) -> None:
        """Hand every message, in order, to ``call(msg)`` (the official client's message_listener)."""
        self._listener_task = start_listener(self, call, executor)

    async def close(self) -> None:
        if self.closed:
            return
        self._flush_acks()
        self.closed = True
        for pending in (self._listener_task, self._reconnecting):
            if pending is not None:
                pending.cancel()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        await self._letters.close()
        conn = self.conn
        if conn is not None and not conn.closed and conn.consumers.pop(self.consumer_id, None) is not None:
            try:
                await conn.request(T.CLOSE_CONSUMER, "close_consumer",
                                   pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=conn.next_request_id()))
            except MagnetarError:
                pass


def start_listener(source, call, executor=None) -> asyncio.Task:
    """Pump ``source.receive()`` into ``call(msg)``, in order. With an ``executor`` (the sync facade passes a
    one-thread pool) the listener runs off the event loop and may block."""

    async def pump():
        loop = asyncio.get_running_loop()
        while not source.closed:
            msg = await source.receive()
            try:
                if executor is None:
                    call(msg)
                else:
                    await loop.run_in_executor(executor, call, msg)
            except Exception:  # a failing listener must not stop delivery
                log.exception("message listener on %s failed", source.topic())

    return asyncio.get_running_loop().create_task(pump())


def _bitset(indexes: set[int], size: int) -> list[int]:
    words = [0] * ((size + 63) // 64)
    for i in indexes:
        words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def _acked_indexes(ack_set, size: int) -> set[int]:
    """Indexes whose bit is clear in the broker's ack_set (already acknowledged); empty when there is none."""
    if not len(ack_set):
        return set()
    remaining = {wi * 64 + b for wi, w in enumerate(ack_set) for b in range(64) if (w & ((1 << 64) - 1)) >> b & 1}
    return set(range(size)) - remaining


__all__ = ["AsyncConsumer", "ConsumerType", "DeadLetterPolicy", "InitialPosition", "Timeout"]
