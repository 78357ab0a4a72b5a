"""The synchronous facade of magnetar.streams: the asyncio client run on a loop in a thread of its own.

    from magnetar.streams.sync import StreamClient
    with StreamClient("127.0.0.1:4181") as client:
        writer = client.open_writer("wal", "log")
        position = writer.append(b"record")
        for record in client.open_reader("wal", "log", start=EARLIEST):
            ...

Every method blocks until its asyncio counterpart answers and raises the same errors
(magnetar.streams.errors); ``timeout_s`` bounds the blocking calls except reads, which wait for records.
"""

from __future__ import annotations

import asyncio
import threading

from magnetar.streams.client import EARLIEST, Position, Record, StreamInfo
from magnetar.streams.client import StreamClient as AsyncStreamClient


class _Loop:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="magnetar-streams", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class StreamClient:
    def __init__(self, address: str, *, timeout_s: float = 30.0, **options):
        """``options``: the asyncio StreamClient's (authentication, use_tls, tls_trust_certs_file_path)."""
        self._loop = _Loop()
        self.timeout_s = timeout_s
        try:
            self._async: AsyncStreamClient = self._run(self._make(address, timeout_s, options))
        except BaseException:
            self._loop.stop()
            raise

    @staticmethod
    async def _make(address: str, timeout_s: float, options: dict) -> AsyncStreamClient:
        return AsyncStreamClient(address, timeout_s=timeout_s, **options)

    def _run(self, coro, timeout: float | None = None):
        return self._loop.run(coro, timeout)

    def __enter__(self) -> "StreamClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._run(self._async.close())
        self._loop.stop()

    def create_namespace(self, name: str, **policies) -> dict:
        return self._run(self._async.create_namespace(name, **policies))

    def get_namespace(self, name: str) -> dict:
        return self._run(self._async.get_namespace(name))

    def list_namespaces(self, tenant: str = "public") -> list[str]:
        return self._run(self._async.list_namespaces(tenant))

    def delete_namespace(self, name: str) -> None:
        self._run(self._async.delete_namespace(name))

    def create_stream(self, namespace: str, name: str, **policies) -> StreamInfo:
        return self._run(self._async.create_stream(namespace, name, **policies))

    def delete_stream(self, namespace: str, name: str) -> None:
        self._run(self._async.delete_stream(namespace, name))

    def list_streams(self, namespace: str) -> list[str]:
        return self._run(self._async.list_streams(namespace))

    def get_info(self, namespace: str, name: str) -> StreamInfo:
        return self._run(self._async.get_info(namespace, name))

    def truncate(self, namespace: str, name: str, before: Position) -> StreamInfo:
        return self._run(self._async.truncate(namespace, name, before))

    def open_writer(self, namespace: str, name: str) -> "StreamWriter":
        return StreamWriter(self, self._run(self._async.open_writer(namespace, name)))

    def open_reader(self, namespace: str, name: str, start=EARLIEST, *, max_records_per_batch: int = 0) -> "StreamReader":
        return StreamReader(self, self._async.open_reader(namespace, name, start,
                                                          max_records_per_batch=max_records_per_batch))


class StreamWriter:
    def __init__(self, client: StreamClient, writer):
        self._client = client
        self._writer = writer

    @property
    def epoch(self) -> int:
        return self._writer.epoch

    def append(self, record: bytes) -> Position:
        return self._client._run(self._writer.append(record))

    def append_batch(self, records) -> list[Position]:
        return self._client._run(self._writer.append_batch(records))

    def close(self) -> None:
        self._client._run(self._writer.close())

    def __enter__(self) -> "StreamWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StreamReader:
    def __init__(self, client: StreamClient, reader):
        self._client = client
        self._reader = reader

    def open(self) -> "StreamReader":
        """Open the read now (see the asyncio StreamReader.open)."""
        self._client._run(self._reader.open(), self._client.timeout_s)
        return self

    def read_batch(self, timeout_s: float | None = None) -> list[Record]:
        """The next batch; TimeoutError after ``timeout_s`` (None: wait for records)."""
        return self._client._run(self._reader.read_batch(), timeout_s)

    def read(self, timeout_s: float | None = None) -> Record:
        return self._client._run(self._reader.__anext__(), timeout_s)

    def __iter__(self):
        return self

    def __next__(self) -> Record:
        try:
            return self.read()
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self._client._run(self._reader.close())

    def __enter__(self) -> "StreamReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
