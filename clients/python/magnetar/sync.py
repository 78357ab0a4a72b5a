"""The synchronous API (``magnetar.Client``), a thin facade over the asyncio one.

One event loop runs in a background thread per client; each blocking call
submits the matching coroutine to it and waits. Callbacks of ``send_async``
run on that loop's thread, as the official client runs them on its I/O threads,
and get what the official client's get: ``callback(Result.Ok, message_id)``, or
``callback(<the error's Result>, <an id of -1s>)``.

Producing does not submit a coroutine per message: scheduling one from another
thread (a future, a task and a wake-up write per message) cost five times what
the asyncio producer does with the message. The calling thread appends the
message to the producer's hand-over queue and wakes the loop only when no
wake-up is due yet; the loop moves everything queued into the asyncio producer
in one pass (which batches it). When ``max_pending_messages`` are queued or
unanswered, ``block_if_queue_full`` makes the calling thread wait on a
condition the loop signals as receipts free room; otherwise the message fails
with ProducerQueueIsFull, as in the official client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from magnetar.asyncio.client import AsyncClient
from magnetar.errors import AlreadyClosed, InvalidConfiguration, ProducerQueueIsFull, Result, result_of
from magnetar.message import MessageId

log = logging.getLogger(__name__)

# What the official client passes as the message id of a failed send.
FAILED_SEND_ID = MessageId(-1, -1, -1, -1)
_SEND_OPTIONS = frozenset({"properties", "partition_key", "ordering_key", "sequence_id", "event_timestamp",
                           "deliver_at", "deliver_after"})


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is optional for the client: plain asyncio works, a little slower
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Client:
    def __init__(self, service_url: str, authentication=None, operation_timeout_seconds: float = 30,
                 tls_trust_certs_file_path: str | None = None, tls_allow_insecure_connection: bool = False,
                 tls_validate_hostname: bool = False, listener_name: str | None = None,
                 tls_private_key_file_path: str | None = None, tls_certificate_file_path: str | None = None,
                 **unsupported):
        """The official client's options where magnetar implements them (see AsyncClient). Any other option of
        pulsar.Client (io_threads, logger, ...) raises InvalidConfiguration: never silently ignored."""
        if unsupported:
            raise InvalidConfiguration(f"magnetar.Client does not support the option(s) {', '.join(sorted(unsupported))}")
        options = dict(authentication=authentication, operation_timeout_seconds=operation_timeout_seconds,
                       tls_trust_certs_file_path=tls_trust_certs_file_path,
                       tls_allow_insecure_connection=tls_allow_insecure_connection,
                       tls_validate_hostname=tls_validate_hostname, listener_name=listener_name,
                       tls_private_key_file_path=tls_private_key_file_path,
                       tls_certificate_file_path=tls_certificate_file_path)
        AsyncClient.check_options(service_url, **options)  # bad options fail here, before a thread starts
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="magnetar-client", daemon=True)
        self._thread.start()
        self._async = self._run(self._make(service_url, options))
        self._producers: list[Producer] = []
        self._closed = False

    async def _make(self, url, options):
        return AsyncClient(url, **options)

    def _run(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def create_producer(self, topic: str, **options) -> "Producer":
        """A producer. ``max_pending_messages`` (1,000) bounds the messages queued or unanswered;
        ``block_if_queue_full`` (False) decides whether a send waits for room or fails with ProducerQueueIsFull."""
        max_pending = options.get("max_pending_messages", 1000)
        if max_pending < 1:
            raise ValueError(f"max_pending_messages must be at least 1, got {max_pending}")
        inner = self._run(self._async.create_producer(topic, **options))
        producer = Producer(self, inner, max_pending, options.get("block_if_queue_full", False))
        self._producers.append(producer)
        return producer

    def subscribe(self, topic, subscription_name: str, message_listener=None, **options) -> "Consumer":
        """``message_listener(consumer, message)`` runs on a thread of its own, in message order, and may block."""
        consumer = Consumer(self, self._run(self._async.subscribe(topic, subscription_name, **options)))
        if message_listener is not None:
            consumer._listener_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-listener")
            self._loop.call_soon_threadsafe(consumer._inner.start_listener,
                                            lambda msg: message_listener(consumer, msg), consumer._listener_pool)
        return consumer

    def create_reader(self, topic: str, start_message_id, **options) -> "Reader":
        return Reader(self, self._run(self._async.create_reader(topic, start_message_id, **options)))

    def create_table_view(self, topic: str, schema=None) -> "TableView":
        """The latest value of each key of ``topic`` (empty values delete keys), kept up to date."""
        return TableView(self, self._run(self._async.create_table_view(topic, schema)))

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._async.get_topic_partitions(topic))

    def get_schema_info(self, topic: str, version: int | None = None):
        """The topic's schema (magnetar.schema.SchemaInfo), the latest or by version; TopicNotFound without one."""
        return self._run(self._async.get_schema_info(topic, version))

    def close(self) -> None:
        """Close every producer (sending what they hold first) and consumer, then the connections."""
        if self._closed:
            return
        self._closed = True
        for producer in self._producers:
            producer._stop_accepting()
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _close(self) -> None:
        for producer in self._producers:
            await producer._hand_over_all()
        await self._async.close()

    def _on_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident


class _Facade:
    def __init__(self, client: Client, inner):
        self._client, self._inner = client, inner

    def _run(self, coro, timeout=None):
        if self._client._closed:
            coro.close()
            raise AlreadyClosed("client is closed")
        return self._client._run(coro, timeout)

    def topic(self) -> str:
        return self._inner.topic()

    def close(self) -> None:
        self._run(self._inner.close())


class Producer(_Facade):
    """Messages go from the calling threads to the loop through ``_queue`` (see the module's docstring).

    Only the loop takes from ``_queue``, only callers append to it. ``_inner_load`` is the asyncio producer's
    pending count as the loop keeps it: raised with each message it moves (right after taking it from
    ``_queue``, so a caller counts a message in flight between the two at most once short), refreshed when
    receipts lower the real count. A stale read therefore over-counts: a caller may wait a little long, and
    every receipt ends in ``_pump``, which wakes waiting callers.
    """

    def __init__(self, client: Client, inner, max_pending_messages: int, block_if_queue_full: bool):
        super().__init__(client, inner)
        self._max_pending = max_pending_messages
        self._block = block_if_queue_full
        self._queue: deque = deque()  # (content, completion, options) not yet in the asyncio producer
        self._handed_over = 0  # messages taken from _queue so far
        self._inner_load = 0
        self._wake_due = False
        self._room = threading.Condition(threading.Lock())
        self._waiting = 0  # callers waiting in _wait_for_room
        self._hand_over_waiters: list[tuple[int, asyncio.Future]] = []
        self._closing = False
        inner.on_room = self._pump

    def send(self, content, **kwargs) -> MessageId:
        """Send and wait for the broker's receipt; the message's id. Raises the error that failed it."""
        if self._client._on_loop_thread():
            raise RuntimeError("Producer.send() would wait for the thread it runs on (a send_async callback); "
                               "use send_async there")
        done = concurrent.futures.Future()
        self._submit(content, done, kwargs)
        return done.result()

    def send_async(self, content, callback, **kwargs) -> None:
        """Queue a message; ``callback(result, message_id)`` (None for no callback) runs on the client's
        thread when the broker answers, in send order: ``(Result.Ok, id)`` or ``(Result.<error>, id of -1s)``."""
        self._submit(content, None if callback is None else _Callback(callback), kwargs)

    def _submit(self, content, completion, options: dict) -> None:
        if self._inner.schema is not None and content is not None:  # None: a tombstone (null value)
            content = self._inner.schema.encode(content)
        if type(content) is not bytes and content is not None:
            content = _as_bytes(content)
        if options and not options.keys() <= _SEND_OPTIONS:
            raise TypeError(f"unknown send options: {', '.join(sorted(options.keys() - _SEND_OPTIONS))}")
        if self._closing or self._client._closed:
            _fail(completion, AlreadyClosed(f"producer on {self.topic()} is closed"))
            return
        if len(self._queue) + self._inner_load >= self._max_pending and not self._wait_for_room(completion):
            return
        self._queue.append((content, completion, options))
        if not self._wake_due:
            self._wake_due = True
            self._client._loop.call_soon_threadsafe(self._pump)

    def _wait_for_room(self, completion) -> bool:
        """Wait until the producer has room (True), or fail the message: full without blocking, or closed."""
        if not self._block or self._client._on_loop_thread():  # the loop thread must not wait for itself
            _fail(completion, ProducerQueueIsFull(f"{self._max_pending} messages already pending on {self.topic()}"))
            return False
        with self._room:
            self._waiting += 1
            try:
                while len(self._queue) + self._inner_load >= self._max_pending and not self._closing:
                    self._room.wait()
            finally:
                self._waiting -= 1
        if self._closing:
            _fail(completion, AlreadyClosed(f"producer on {self.topic()} is closed"))
            return False
        return True

    def _pump(self) -> None:
        """On the loop: move queued messages into the asyncio producer until it is full, then wake waiters."""
        self._wake_due = False  # cleared first: a message queued from here on either is moved now or wakes us again
        queue, inner = self._queue, self._inner
        moved = 0
        while queue:
            item = queue.popleft()
            try:
                inner.enqueue(item[0], item[1], **item[2])
            except ProducerQueueIsFull:
                queue.appendleft(item)  # resumed by the next receipt (inner.on_room)
                break
            except Exception as exc:  # noqa: BLE001 (MessageTooBig, AlreadyClosed, a bad option: this message's failure)
                _fail(item[1], exc)
            else:
                self._inner_load += 1
            moved += 1
        self._handed_over += moved
        self._inner_load = inner.pending_messages()
        if self._hand_over_waiters:
            waiting = []
            for target, done in self._hand_over_waiters:
                if self._handed_over < target:
                    waiting.append((target, done))
                elif not done.done():
                    done.set_result(None)
            self._hand_over_waiters = waiting
        if self._waiting:
            with self._room:
                self._room.notify_all()

    async def _hand_over_all(self) -> None:
        """On the loop: wait until every message queued so far is in the asyncio producer (or failed)."""
        target = self._handed_over + len(self._queue)
        self._pump()
        if self._handed_over < target:
            done = asyncio.get_running_loop().create_future()
            self._hand_over_waiters.append((target, done))
            await done

    async def _flush(self) -> None:
        await self._hand_over_all()
        await self._inner.flush()

    def flush(self) -> None:
        """Wait until every message sent so far is stored or failed (its callback has run).
        Raises AlreadyClosed once the producer is closed."""
        if self._closing:
            raise AlreadyClosed(f"producer on {self.topic()} is closed")
        self._run(self._flush())

    def close(self) -> None:
        """Send what is queued, wait for the answers, then close; later sends fail with AlreadyClosed."""
        self._stop_accepting()
        self._run(self._close())
        if self in self._client._producers:
            self._client._producers.remove(self)

    async def _close(self) -> None:
        await self._hand_over_all()
        await self._inner.close()

    def _stop_accepting(self) -> None:
        self._closing = True
        with self._room:
            self._room.notify_all()

    def producer_name(self) -> str:
        return self._inner.producer_name()

    def last_sequence_id(self) -> int:
        return self._inner.last_sequence_id()


class _Callback:
    """A ``send_async`` callback as a completion of the asyncio producer (see ``_Send``), called in place."""

    __slots__ = ("callback", "called")

    def __init__(self, callback):
        self.callback = callback
        self.called = False

    def done(self) -> bool:
        return self.called

    def set_result(self, message_id: MessageId) -> None:
        self._call(Result.Ok, message_id)

    def set_exception(self, exc: BaseException) -> None:
        self._call(result_of(exc), FAILED_SEND_ID)

    def _call(self, result: Result, message_id: MessageId) -> None:
        self.called = True
        try:
            self.callback(result, message_id)
        except Exception:  # a failing callback must not stop the receipts of the messages after it
            log.exception("send_async callback raised")


def _fail(completion, exc: BaseException) -> None:
    if completion is not None and not completion.done():
        completion.set_exception(exc)


def _as_bytes(content) -> bytes:
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)  # a copy: the caller may reuse its buffer once send_async returns
    raise TypeError(f"message content must be bytes, got {type(content).__name__}")


class Consumer(_Facade):
    def receive(self, timeout_millis: int | None = None):
        return self._run(self._inner.receive(timeout_millis))

    def batch_receive(self, max_messages: int = 100, timeout_millis: int = 100):
        return self._run(self._inner.batch_receive(max_messages, timeout_millis))

    def acknowledge(self, msg) -> None:
        self._run(self._inner.acknowledge(msg))

    def acknowledge_cumulative(self, msg) -> None:
        self._run(self._inner.acknowledge_cumulative(msg))

    def negative_acknowledge(self, msg) -> None:
        self._client._loop.call_soon_threadsafe(self._inner.negative_acknowledge, msg)

    def reconsume_later(self, msg, delay, properties=None) -> None:
        """Have ``msg`` delivered again after ``delay`` (a timedelta) through the retry-letter topic; needs
        ``subscribe(..., retry_enable=True)``. Returns once the copy is stored and ``msg`` acknowledged."""
        self._run(self._inner.reconsume_later(msg, delay, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        self._run(self._inner.redeliver_unacknowledged_messages())

    def seek(self, target) -> None:
        self._run(self._inner.seek(target))

    def get_last_message_id(self):
        return self._run(self._inner.get_last_message_id())

    def unsubscribe(self) -> None:
        self._run(self._inner.unsubscribe())

    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        return self._inner.consumer_name()


class Reader(_Facade):
    def read_next(self, timeout_millis: int | None = None):
        return self._run(self._inner.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._inner.has_message_available())

    def seek(self, target) -> None:
        self._run(self._inner.seek(target))


class TableView(_Facade):
    """The official client's TableView. Reads are answered from the loop's dict (one lookup: safe under the GIL);
    listeners run on the client's event-loop thread and must not block."""

    def get(self, key: str):
        return self._inner.get(key)

    def __len__(self) -> int:
        return len(self._inner)

    def __contains__(self, key: str) -> bool:
        return key in self._inner

    def for_each(self, action) -> None:
        for key, value in self._run(self._items()):
            action(key, value)

    def for_each_and_listen(self, action) -> None:
        async def register():
            self._inner.for_each_and_listen(action)

        self._run(register())

    async def _items(self):
        return self._inner.items()
