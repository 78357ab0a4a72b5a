"""The synchronous API (``magnetar.Client``), a thin facade over the asyncio one.

One event loop runs in a background thread per client; each blocking call
submits the matching coroutine to it and waits. Callbacks of ``send_async``
run on that loop's thread, as the official client runs them on its I/O threads.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from magnetar.asyncio.client import AsyncClient
from magnetar.errors import AlreadyClosed


class Client:
    def __init__(self, service_url: str, operation_timeout_seconds: float = 30, **_ignored):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="magnetar-client", daemon=True)
        self._thread.start()
        self._async = self._run(self._make(service_url, operation_timeout_seconds))
        self._closed = False

    async def _make(self, url, timeout):
        return AsyncClient(url, operation_timeout_seconds=timeout)

    def _run(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def create_producer(self, topic: str, **options) -> "Producer":
        return Producer(self, self._run(self._async.create_producer(topic, **options)))

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

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._async.get_topic_partitions(topic))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._run(self._async.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


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
    def send(self, content, **kwargs):
        return self._run(self._inner.send(content, **kwargs))

    def send_async(self, content, callback, **kwargs) -> None:
        """Queue a message; ``callback(result_or_exception, message_id)`` runs when the broker answers."""

        async def go():
            try:
                mid = await self._inner.send(content, **kwargs)
            except Exception as exc:  # handed to the callback, as the official client does
                if callback:
                    callback(exc, None)
                return
            if callback:
                callback(None, mid)

        asyncio.run_coroutine_threadsafe(go(), self._client._loop)

    def flush(self) -> None:
        self._run(self._inner.flush())

    def producer_name(self) -> str:
        return self._inner.producer_name()

    def last_sequence_id(self) -> int:
        return self._inner.last_sequence_id()


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
