"""Producer: sequence ids, batching, receipts in order, and resending what is pending after a reconnect.

How it works: each message gets the next sequence id. With batching, messages
collect in a batch until it holds ``batching_max_messages`` messages or
``batching_max_allowed_size_in_bytes`` bytes, or ``batching_max_publish_delay_ms``
passes; a batch is one SEND (one ledger entry). Sends wait in ``pending``
(in sequence order) until their receipt; each receipt completes its messages'
*completions* (a future per message for ``send_async``; the sync facade passes its
own, or none) with ids ``(ledger, entry, batch index)``. When the connection
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
from magnetar.protocol.frames import (
    batch_message_header, command, encode_headers_and_payload, plain_batch_message_header,
)

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
    """One SEND on the wire: a single message or a batch, with the completions waiting for its receipt.

    A completion is anything with ``done()``, ``set_result(message_id)`` and ``set_exception(exc)`` (an
    asyncio or concurrent future, the sync facade's callback), or None when nobody waits for the message.
    ``ordinal`` counts SENDs in the order they were queued, so ``flush()`` can wait for "everything up to here".
    """

    __slots__ = ("sequence_id", "highest_sequence_id", "count", "headers_and_payload", "completions", "batched",
                 "created", "ordinal")

    def __init__(self, sequence_id, highest_sequence_id, count, headers_and_payload, completions, batched=False):
        self.sequence_id, self.highest_sequence_id = sequence_id, highest_sequence_id
        self.count, self.headers_and_payload, self.completions = count, headers_and_payload, completions
        self.batched = batched
        self.created = time.monotonic()
        self.ordinal = 0

    def command(self, producer_id: int):
        send = pb.CommandSend(producer_id=producer_id, sequence_id=self.sequence_id, num_messages=self.count)
        if self.highest_sequence_id != self.sequence_id:
            send.highest_sequence_id = self.highest_sequence_id
        return command(T.SEND, send=send)


class _Batch:
    """Messages collecting for one batched SEND: [header, payload, header, payload, ...] and their completions."""

    __slots__ = ("parts", "completions", "first_seq", "last_seq", "size")

    def __init__(self, first_seq: int):
        self.parts: list[bytes] = []
        self.completions: list = []
        self.first_seq = self.last_seq = first_seq
        self.size = 0


class AsyncProducer:
    def __init__(self, client, topic: str, *, producer_name: str | None = None, batching_enabled: bool = False,
                 batching_max_messages: int = 1000, batching_max_allowed_size_in_bytes: int = 128 * 1024,
                 batching_max_publish_delay_ms: float = 10, send_timeout_millis: int = 30_000,
                 max_pending_messages: int = 1000, block_if_queue_full: bool = False, access_mode: int = 0,
                 initial_sequence_id: int | None = None, partition: int = -1, compression_type: int = 0,
                 chunking_enabled: bool = False, batching_type: int = 0, schema=None):
        self.client = client
        self._topic = topic
        self.schema = schema  # a magnetar.schema.Schema: values are encoded with it; None sends bytes as given
        self.schema_version: bytes | None = None  # the broker's version of the schema, stamped on each message
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
        self._ordinals = 0
        self._flush_waiters: list[tuple[int, asyncio.Future]] = []  # (ordinal of the last SEND to wait for, future)
        self._space = asyncio.Event()
        self.on_room = None  # called (on the loop) whenever pending messages were answered, failed or expired
        self._batches: dict[object, _Batch] = {}  # batch key -> batch; one key unless batching is KeyBased
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
        declared = self.schema.schema_info().to_proto() if self.schema is not None else None
        if declared is not None:
            req.schema.CopyFrom(declared)
        try:
            success = await self.conn.request(T.PRODUCER, "producer", req)
        except BaseException:
            self.conn.producers.pop(self.producer_id, None)
            raise
        self._name = success.producer_name
        self.schema_version = success.schema_version if success.HasField("schema_version") and success.schema_version \
            else None
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
        if self._queue_full() and not self.block_if_full:
            raise ProducerQueueIsFull(f"{self.max_pending} messages already pending on {self._topic}")
        await self.wait_for_room()
        return await self.send_async(content, **kwargs)

    async def wait_for_room(self) -> None:
        """Return once fewer than ``max_pending_messages`` are pending (what ``block_if_queue_full`` waits for)."""
        while self._queue_full():
            self._space.clear()
            await self._space.wait()

    def _queue_full(self) -> bool:
        return self._pending_messages + self._batched >= self.max_pending

    def pending_messages(self) -> int:
        """Messages queued and not yet answered (batched or in flight); ``max_pending_messages`` bounds it."""
        return self._pending_messages + self._batched

    def send_async(self, content: bytes, **kwargs) -> asyncio.Future:
        """Queue a message now, without a task per message; the returned future resolves to its MessageId.

        Raises AlreadyClosed, MessageTooBig, and ProducerQueueIsFull when the pending queue is full
        (callers that want to wait for room use ``await send(...)``). A send older than
        ``send_timeout_millis`` fails with Timeout.
        """
        if self.schema is not None and content is not None:  # None: a tombstone, with or without a schema
            content = self.schema.encode(content)
        fut = asyncio.get_running_loop().create_future()
        self.enqueue(content, fut, **kwargs)
        return fut

    def enqueue(self, content: bytes, completion, *, properties=None, partition_key=None, ordering_key=None,
                sequence_id=None, event_timestamp=None, deliver_at=None, deliver_after=None) -> None:
        """``send_async`` with the caller's own completion (see ``_Send``; None when nobody waits). Raises as it."""
        if self.closed:
            raise AlreadyClosed(f"producer on {self._topic} is closed")
        null_value = content is None  # a tombstone for compaction: no value at all, not an empty one
        if null_value:
            content = b""
        elif type(content) is not bytes:
            content = bytes(content)
        size = len(content)
        if size > self.client.max_message_size and not self.chunking:
            raise MessageTooBig(f"message of {size} bytes exceeds the maximum of {self.client.max_message_size}"
                                " (enable chunking to send it)")
        if self._pending_messages + self._batched >= self.max_pending:
            raise ProducerQueueIsFull(f"{self.max_pending} messages already pending on {self._topic}")
        if sequence_id is None:
            seq = self._next_seq
            self._next_seq = seq + 1
        else:
            seq = sequence_id
            self._next_seq = max(self._next_seq, seq + 1)
        if self._timeout_timer is None and self.send_timeout_s is not None:
            self._arm_timeouts(asyncio.get_running_loop())
        deliver_at_ms = None
        if deliver_after is not None:
            deliver_at_ms = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
        elif deliver_at is not None:
            deliver_at_ms = int(deliver_at)
        keyed = (properties or partition_key is not None or ordering_key is not None or event_timestamp is not None
                 or null_value)
        if self.batching and deliver_at_ms is None:
            key = None
            if keyed:
                smm = pb.SingleMessageMetadata(payload_size=size, sequence_id=seq)
                if null_value:
                    smm.null_value = True
                _fill(smm, properties=properties, partition_key=partition_key, ordering_key=ordering_key,
                      event_timestamp=event_timestamp)
                header = batch_message_header(smm)
                if self.key_based and ordering_key is not None:
                    key = ("ordering", ordering_key.encode() if isinstance(ordering_key, str) else ordering_key)
                elif self.key_based and partition_key is not None:
                    key = ("partition", partition_key)
            else:
                header = plain_batch_message_header(size, seq)
            batch = self._batches.get(key)
            if batch is None:
                batch = self._batches[key] = _Batch(seq)
            batch.parts.append(header)
            batch.parts.append(content)
            batch.completions.append(completion)
            batch.last_seq = seq
            batch.size += size
            self._batched += 1
            if len(batch.completions) >= self.batch_max_messages or batch.size >= self.batch_max_bytes:
                self._flush_batch(key)
            elif self._batch_timer is None:
                self._batch_timer = asyncio.get_running_loop().call_later(self.batch_delay_s, self._flush_batch)
        else:
            self._flush_batch()  # keep order with anything batched before
            md = self._metadata(seq)
            _fill(md, properties=properties, partition_key=partition_key, ordering_key=ordering_key,
                  event_timestamp=event_timestamp)
            if deliver_at_ms is not None:
                md.deliver_at_time = deliver_at_ms
            if null_value:
                md.null_value = True
            if size > self.client.max_message_size:
                self._enqueue_chunks(md, content, completion)
            else:
                self._enqueue(_Send(seq, seq, 1, self._encode(md, content), [completion]))

    def _enqueue_chunks(self, md, content: bytes, completion) -> None:
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
            self._enqueue(_Send(md.sequence_id, md.sequence_id, 1, self._encode(part, chunk), [completion if last else None]))

    def _arm_timeouts(self, loop) -> None:
        """One timer per producer (not per message) fails sends older than the send timeout."""
        if self.send_timeout_s is None or self._timeout_timer is not None or self.closed:
            return
        self._timeout_timer = loop.call_later(min(1.0, self.send_timeout_s), self._expire)

    def _expire(self) -> None:
        self._timeout_timer = None
        deadline = time.monotonic() - self.send_timeout_s
        expired = False
        while self._pending:
            send = self._pending[0]
            if send.created > deadline:
                break
            self._pending.popleft()
            self._pending_messages -= send.count
            expired = True
            for c in send.completions:
                if c is not None and not c.done():
                    c.set_exception(Timeout(f"send to {self._topic} not acknowledged within {self.send_timeout_s} s"))
        if expired:
            self._room()
        if self._pending or self._batched:
            self._arm_timeouts(asyncio.get_running_loop())

    def _metadata(self, seq: int) -> pb.MessageMetadata:
        md = pb.MessageMetadata(producer_name=self._name or "", sequence_id=seq, publish_time=int(time.time() * 1000))
        if self.schema_version is not None:
            md.schema_version = self.schema_version
        return md

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
        if self.key_based:
            # Key batches hold interleaved sequence ids (A: 0, 2; B: 1, 3). Each goes out under its highest id, all
            # of them together in that order, so the ids the broker's deduplication sees only rise: sent alone or
            # under its lowest id, B would look like a duplicate of A and be answered without being stored.
            keys = sorted(self._batches, key=lambda k: self._batches[k].last_seq)
        else:
            keys = list(self._batches) if key is ... else [key]
        for k in keys:
            batch = self._batches.pop(k, None)
            if batch is None or not batch.completions:
                continue
            count = len(batch.completions)
            self._batched -= count
            md = self._metadata(batch.first_seq)
            md.num_messages_in_batch = count
            md.highest_sequence_id = batch.last_seq
            if k is not None:  # key-based batching: the batch carries its key, so Key_Shared can route it
                if k[0] == "ordering":
                    md.ordering_key = k[1]
                else:
                    md.partition_key = k[1]
            send_id = batch.last_seq if self.key_based else batch.first_seq
            self._enqueue(_Send(send_id, batch.last_seq, count, self._encode(md, b"".join(batch.parts)),
                                batch.completions, batched=True))

    def _enqueue(self, send: _Send) -> None:
        self._ordinals += 1
        send.ordinal = self._ordinals
        self._pending.append(send)
        self._pending_messages += send.count
        if self._ready.is_set() and self.conn is not None and not self.conn.closed:
            self.conn.write_with_payload(send.command(self.producer_id), send.headers_and_payload)

    async def flush(self) -> None:
        """Send what is batched and wait until every message queued so far is answered (stored or failed)."""
        self._flush_batch()
        if self._pending:
            done = asyncio.get_running_loop().create_future()
            self._flush_waiters.append((self._pending[-1].ordinal, done))
            await done

    def _room(self) -> None:
        """Pending messages were answered, failed or expired: wake whoever waits for room or for a flush."""
        self._space.set()
        if self._flush_waiters:
            head = self._pending[0].ordinal if self._pending else self._ordinals + 1
            waiting = []
            for ordinal, done in self._flush_waiters:
                if ordinal < head:
                    if not done.done():
                        done.set_result(None)
                elif not done.done():
                    waiting.append((ordinal, done))
            self._flush_waiters = waiting
        if self.on_room is not None:
            self.on_room()

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
            self._last_seq_published = max(self._last_seq_published, first.highest_sequence_id)
            for i, c in enumerate(first.completions):
                if c is not None and not c.done():
                    c.set_result(MessageId(self.partition, ledger, entry, i if first.batched else -1))
            if first.sequence_id == receipt.sequence_id:
                break
        self._room()

    def on_send_error(self, error) -> None:
        exc = for_code(error.error, error.message)
        if exc.retriable:
            self.on_connection_lost(self.conn)  # reconnect and resend, as the official client does
            return
        for send in list(self._pending):
            if send.sequence_id == error.sequence_id:
                self._pending.remove(send)
                self._pending_messages -= send.count
                for c in send.completions:
                    if c is not None and not c.done():
                        c.set_exception(exc)
        self._room()

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, deque()
        self._pending_messages = 0
        for send in pending:
            for c in send.completions:
                if c is not None and not c.done():
                    c.set_exception(exc)
        self._room()

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
