"""Producer: sequence ids, batching, receipts in order, and resending what is pending after a reconnect.

How it works: each message gets the next sequence id. With batching, messages
collect in a batch until it holds ``batching_max_messages`` messages or
``batching_max_allowed_size_in_bytes`` bytes, or ``batching_max_publish_delay_ms``
passes; a batch is one SEND (one ledger entry). Sends wait in ``pending``
(in sequence order) until their receipt; each receipt completes the futures of
its messages with ids ``(ledger, entry, batch index)``. When the connection
drops or the broker closes the producer, the producer looks the topic up
again, re-creates itself under the same name and resends everything pending,
in order, so nothing acknowledged is lost and nothing is reordered.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque

from magnetar.compression import CompressionType, compress
from magnetar.errors import AlreadyClosed, MagnetarError, MessageTooBig, ProducerQueueIsFull, Timeout, for_code
from magnetar.message import MessageId
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_headers_and_payload, pack_batch

log = logging.getLogger(__name__)
T = pb.BaseCommand


class ProducerAccessMode(enum.IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class BatchingType(enum.IntEnum):
    Default = 0
    KeyBased = 1  # one batch per key, so Key_Shared consumers get whole batches of their keys


class _Send:
    """One SEND on the wire: a single message or a batch, with the futures waiting for its receipt."""

    __slots__ = ("sequence_id", "highest_sequence_id", "count", "headers_and_payload", "futures", "batched", "created")

    def __init__(self, sequence_id, highest_sequence_id, count, headers_and_payload, futures, batched=False):
        self.sequence_id, self.highest_sequence_id = sequence_id, highest_sequence_id
        self.count, self.headers_and_payload, self.futures = count, headers_and_payload, futures
        self.batched = batched
        self.created = time.monotonic()

    def command(self, producer_id: int):
        send = pb.CommandSend(producer_id=producer_id, sequence_id=self.sequence_id, num_messages=self.count)
        if self.highest_sequence_id != self.sequence_id:
            send.highest_sequence_id = self.highest_sequence_id
        return command(T.SEND, send=send)


class AsyncProducer:
    def __init__(self, client, topic: str, *, producer_name: str | None = None, batching_enabled: bool = False,
                 batching_max_messages: int = 1000, batching_max_allowed_size_in_bytes: int = 128 * 1024,
                 batching_max_publish_delay_ms: float = 10, send_timeout_millis: int = 30_000,
                 max_pending_messages: int = 1000, block_if_queue_full: bool = False, access_mode: int = 0,
                 initial_sequence_id: int | None = None, partition: int = -1, compression_type: int = 0,
                 chunking_enabled: bool = False, batching_type: int = 0):
        self.client = client
        self._topic = topic
        self._name = producer_name
        self._user_named = producer_name is not None
        self.batching = batching_enabled
        self.batch_max_messages = batching_max_messages
        self.batch_max_bytes = batching_max_allowed_size_in_bytes
        self.batch_delay_s = batching_max_publish_delay_ms / 1000
        self.send_timeout_s = send_timeout_millis / 1000 if send_timeout_millis else None
        self.max_pending = max_pending_messages
        self.block_if_full = block_if_queue_full
        self.access_mode = int(access_mode)
        self.partition = partition
        self.compression = CompressionType(compression_type)
        if chunking_enabled and batching_enabled:
            raise ValueError("chunking_enabled needs batching_enabled=False (as in the official client)")
        self.chunking = chunking_enabled
        self.key_based = BatchingType(batching_type) is BatchingType.KeyBased
        self.producer_id = client.next_handler_id()
        self.conn = None
        self.epoch = 0
        self.topic_epoch = None
        self._next_seq = 0 if initial_sequence_id is None else initial_sequence_id + 1
        self._last_seq_published = -1 if initial_sequence_id is None else initial_sequence_id
        self._pending: deque[_Send] = deque()  # in send order; chunks of one message share a sequence id
        self._pending_messages = 0
        self._space = asyncio.Event()
        self._batches: dict = {}  # batch key -> [messages, bytes]; one key unless batching is KeyBased
        self._batched = 0  # messages waiting in batches
        self._batch_timer: asyncio.TimerHandle | None = None
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._reconnecting: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self.closed = False

    # ---- lifecycle --------------------------------------------------------------------

    async def _connect(self) -> None:
        self.conn = await self.client.connection_for(self._topic)
        self.conn.producers[self.producer_id] = self
        req = pb.CommandProducer(topic=self._topic, producer_id=self.producer_id, request_id=self.conn.next_request_id(),
                                 epoch=self.epoch, user_provided_producer_name=self._user_named,
                                 producer_access_mode=self.access_mode)
        if self._name:
            req.producer_name = self._name
        if self.topic_epoch is not None:
            req.topic_epoch = self.topic_epoch
        try:
            success = await self.conn.request(T.PRODUCER, "producer", req)
        except BaseException:
            self.conn.producers.pop(self.producer_id, None)
            raise
        self._name = success.producer_name
        if success.HasField("topic_epoch"):
            self.topic_epoch = success.topic_epoch
        if success.last_sequence_id >= self._next_seq:
            self._next_seq = success.last_sequence_id + 1
        self._last_seq_published = max(self._last_seq_published, success.last_sequence_id)
        self._ready.set()
        for send in list(self._pending):  # resend in order after a reconnect
            self.conn.write_with_payload(send.command(self.producer_id), send.headers_and_payload)

    def on_connection_lost(self, conn) -> None:
        if self.closed or conn is not self.conn:
            return
        self._ready.clear()
        conn.producers.pop(self.producer_id, None)
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        self.epoch += 1
        async for attempt in self.client.backoff():
            if self.closed:
                return
            try:
                await self._connect()
                return
            except MagnetarError as exc:
                if not exc.retriable:
                    self._fail_pending(exc)
                    return
                log.info("producer %s on %s: reconnect attempt %d failed: %s", self._name, self._topic, attempt, exc)

    # ---- sending ----------------------------------------------------------------------

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._name

    def last_sequence_id(self) -> int:
        return self._last_seq_published

    async def send(self, content: bytes, **kwargs) -> MessageId:
        """Send and wait until the broker has stored the message. Waits for room when the queue is full and
        ``block_if_queue_full``; raises ProducerQueueIsFull otherwise."""
        while self._queue_full():
            if not self.block_if_full:
                raise ProducerQueueIsFull(f"{self.max_pending} messages already pending on {self._topic}")
            self._space.clear()
            await self._space.wait()
        return await self.send_async(content, **kwargs)

    def _queue_full(self) -> bool:
        return self._pending_messages + self._batched >= self.max_pending

    def send_async(self, content: bytes, *, properties=None, partition_key=None, ordering_key=None,
                   sequence_id=None, event_timestamp=None, deliver_at=None, deliver_after=None) -> asyncio.Future:
        """Queue a message now, without a task per message; the returned future resolves to its MessageId.

        Raises AlreadyClosed, MessageTooBig, and ProducerQueueIsFull when the pending queue is full
        (callers that want to wait for room use ``await send(...)``). A send older than
        ``send_timeout_millis`` fails with Timeout.
        """
        if self.closed:
            raise AlreadyClosed(f"producer on {self._topic} is closed")
        content = bytes(content)
        if len(content) > self.client.max_message_size and not self.chunking:
            raise MessageTooBig(f"message of {len(content)} bytes exceeds the maximum of {self.client.max_message_size}"
                                " (enable chunking to send it)")
        if self._queue_full():
            raise ProducerQueueIsFull(f"{self.max_pending} messages already pending on {self._topic}")
        seq = self._next_seq if sequence_id is None else sequence_id
        self._next_seq = max(self._next_seq, seq + 1)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._arm_timeouts(loop)
        deliver_at_ms = None
        if deliver_after is not None:
            deliver_at_ms = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
        elif deliver_at is not None:
            deliver_at_ms = int(deliver_at)
        keyed = properties or partition_key is not None or ordering_key is not None or event_timestamp is not None
        if self.batching and deliver_at_ms is None:
            smm = pb.SingleMessageMetadata(payload_size=len(content), sequence_id=seq)
            if keyed:
                _fill(smm, properties=properties, partition_key=partition_key, ordering_key=ordering_key,
                      event_timestamp=event_timestamp)
            key = None
            if self.key_based and ordering_key is not None:
                key = ("ordering", ordering_key.encode() if isinstance(ordering_key, str) else ordering_key)
            elif self.key_based and partition_key is not None:
                key = ("partition", partition_key)
            batch = self._batches.setdefault(key, [[], 0])
            batch[0].append((smm, content, fut, seq))
            batch[1] += len(content)
            self._batched += 1
            if len(batch[0]) >= self.batch_max_messages or batch[1] >= self.batch_max_bytes:
                self._flush_batch(key)
            elif self._batch_timer is None:
                self._batch_timer = loop.call_later(self.batch_delay_s, self._flush_batch)
        else:
            self._flush_batch()  # keep order with anything batched before
            md = self._metadata(seq)
            _fill(md, properties=properties, partition_key=partition_key, ordering_key=ordering_key,
                  event_timestamp=event_timestamp)
            if deliver_at_ms is not None:
                md.deliver_at_time = deliver_at_ms
            if len(content) > self.client.max_message_size:
                self._enqueue_chunks(md, content, fut)
            else:
                self._enqueue(_Send(seq, seq, 1, self._encode(md, content), [fut]))
        return fut

    def _enqueue_chunks(self, md, content: bytes, fut) -> None:
        """Split a message above the broker's limit into chunks that share its sequence id (Pulsar's chunking)."""
        room = self.client.max_message_size - 64 * 1024  # leave the metadata room inside the limit
        chunks = [content[i:i + room] for i in range(0, len(content), room)]
        md.uuid = f"{self._name}-{md.sequence_id}"
        md.num_chunks_from_msg = len(chunks)
        md.total_chunk_msg_size = len(content)
        for i, chunk in enumerate(chunks):
            part = pb.MessageMetadata()
            part.CopyFrom(md)
            part.chunk_id = i
            last = i == len(chunks) - 1
            self._enqueue(_Send(md.sequence_id, md.sequence_id, 1, self._encode(part, chunk), [fut if last else None]))

    def _arm_timeouts(self, loop) -> None:
        """One timer per producer (not per message) fails sends older than the send timeout."""
        if self.send_timeout_s is None or self._timeout_timer is not None:
            return
        self._timeout_timer = loop.call_later(min(1.0, self.send_timeout_s), self._expire)

    def _expire(self) -> None:
        self._timeout_timer = None
        deadline = time.monotonic() - self.send_timeout_s
        while self._pending:
            send = self._pending[0]
            if send.created > deadline:
                break
            self._pending.popleft()
            self._pending_messages -= send.count
            for fut in send.futures:
                if fut is not None and not fut.done():
                    fut.set_exception(Timeout(f"send to {self._topic} not acknowledged within {self.send_timeout_s} s"))
            self._space.set()
        if self._pending or self._batched:
            self._arm_timeouts(asyncio.get_running_loop())

    def _metadata(self, seq: int) -> pb.MessageMetadata:
        return pb.MessageMetadata(producer_name=self._name or "", sequence_id=seq, publish_time=int(time.time() * 1000))

    def _encode(self, md, payload: bytes) -> bytes:
        if self.compression is not CompressionType.NONE:
            md.compression = int(self.compression)
            md.uncompressed_size = len(payload)
            payload = compress(self.compression, payload)
        return encode_headers_and_payload(md, payload)

    def _flush_batch(self, key=...) -> None:
        """Send the batch for ``key`` (every batch when no key is given) as one SEND."""
        if key is ... or not self._batches.keys() - {key}:
            if self._batch_timer is not None:
                self._batch_timer.cancel()
                self._batch_timer = None
        keys = list(self._batches) if key is ... else [key]
        for k in keys:
            messages, _ = self._batches.pop(k, ([], 0))
            if not messages:
                continue
            self._batched -= len(messages)
            md = self._metadata(messages[0][3])
            md.num_messages_in_batch = len(messages)
            md.highest_sequence_id = messages[-1][3]
            if k is not None:  # key-based batching: the batch carries its key, so Key_Shared can route it
                if k[0] == "ordering":
                    md.ordering_key = k[1]
                else:
                    md.partition_key = k[1]
            payload = pack_batch([(smm, content) for smm, content, _, _ in messages])
            self._enqueue(_Send(messages[0][3], messages[-1][3], len(messages), self._encode(md, payload),
                                [fut for _, _, fut, _ in messages], batched=True))

    def _enqueue(self, send: _Send) -> None:
        self._pending.append(send)
        self._pending_messages += send.count
        if self._ready.is_set() and self.conn is not None and not self.conn.closed:
            self.conn.write_with_payload(send.command(self.producer_id), send.headers_and_payload)

    async def flush(self) -> None:
        self._flush_batch()
        if self._pending:
            await asyncio.gather(*(f for s in list(self._pending) for f in s.futures), return_exceptions=True)

    # ---- receipts ---------------------------------------------------------------------

    def on_receipt(self, receipt) -> None:
        if not any(send.sequence_id == receipt.sequence_id for send in self._pending):
            return  # a late receipt for something already answered (e.g. before a reconnect)
        mid = receipt.message_id
        ledger = mid.ledgerId if mid.ledgerId < 1 << 63 else -1
        entry = mid.entryId if mid.entryId < 1 << 63 else -1
        # Receipts come in order: anything pending before this one was answered by a duplicate check.
        while self._pending:
            first = self._pending.popleft()
            self._pending_messages -= first.count
            for i, fut in enumerate(first.futures):
                if fut is not None and not fut.done():
                    fut.set_result(MessageId(ledger, entry, i if first.batched else -1, self.partition))
            self._last_seq_published = max(self._last_seq_published, first.highest_sequence_id)
            if first.sequence_id == receipt.sequence_id:
                break
        self._space.set()

    def on_send_error(self, error) -> None:
        exc = for_code(error.error, error.message)
        if exc.retriable:
            self.on_connection_lost(self.conn)  # reconnect and resend, as the official client does
            return
        for send in list(self._pending):
            if send.sequence_id == error.sequence_id:
                self._pending.remove(send)
                self._pending_messages -= send.count
                for fut in send.futures:
                    if fut is not None and not fut.done():
                        fut.set_exception(exc)
        self._space.set()

    def _fail_pending(self, exc: BaseException) -> None:
        for send in self._pending:
            for fut in send.futures:
                if fut is not None and not fut.done():
                    fut.set_exception(exc)
        self._pending.clear()
        self._pending_messages = 0
        self._space.set()

    async def close(self) -> None:
        if self.closed:
            return
        await self.flush()
        self.closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        conn = self.conn
        if conn is not None and not conn.closed and self.producer_id in conn.producers:
            conn.producers.pop(self.producer_id, None)
            try:
                await conn.request(T.CLOSE_PRODUCER, "close_producer",
                                   pb.CommandCloseProducer(producer_id=self.producer_id, request_id=conn.next_request_id()))
            except MagnetarError:
                pass
        self._fail_pending(AlreadyClosed("producer closed"))


def _fill(md, *, properties=None, partition_key=None, ordering_key=None, event_timestamp=None) -> None:
    for k, v in (properties or {}).items():
        md.properties.add(key=str(k), value=str(v))
    if partition_key is not None:
        md.partition_key = partition_key
    if ordering_key is not None:
        md.ordering_key = ordering_key.encode() if isinstance(ordering_key, str) else ordering_key
    if event_timestamp is not None:
        md.event_time = event_timestamp
