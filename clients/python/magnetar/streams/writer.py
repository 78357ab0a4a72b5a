"""StreamWriter: one fenced writer of a stream, as one gRPC bidirectional stream.

``append`` and ``append_batch`` send one request each (one entry on the
bookies, a record set for a batch) without waiting for earlier ones, so
concurrent appends are pipelined; their answers come back in order and
resolve the callers' futures in order. Once the RPC ends with an error
(WriterFenced when another writer opened the stream; StreamUnavailable when
the broker went away) every pending and later append raises it. The writer
asks the broker to name that error in-band (an ``ended`` response) before the
status, and then stops writing and half-closes: grpcio's aio client replaces
the status of a call that ends while one of its writes is in flight by its own
INTERNAL "Internal error from Core", which would lose the error's class.
"""

from __future__ import annotations

import asyncio
import collections

import grpc

from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams.client import Position, records_of
from magnetar.streams.errors import END_NOTICE_KEY, StreamError, StreamUnavailable, error_of, from_rpc_error

MAX_PENDING_APPENDS = 1000  # the server pipelines as many; more wait here


class StreamWriter:
    def __init__(self, client, namespace: str, name: str):
        self.client = client
        self.namespace = namespace
        self.name = name
        self.epoch = -1
        self.next_sequence = 0
        self._call = None
        self._pending: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self._request_id = 0
        self._write_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(MAX_PENDING_APPENDS)
        self._responses: asyncio.Task | None = None
        self._error: StreamError | None = None

    @classmethod
    async def open(cls, client, namespace: str, name: str) -> "StreamWriter":
        writer = cls(client, namespace, name)

        async def attempt(stub, metadata):
            call = stub.Write(metadata=metadata + ((END_NOTICE_KEY, "true"),))
            try:
                await call.write(pb.WriteRequest(open=pb.StreamRequest(namespace=namespace, stream=name)))
                first = await call.read()
            except BaseException:
                call.cancel()
                raise
            if first is grpc.aio.EOF:
                await call.wait_for_connection()
                raise StreamUnavailable("the write stream ended before the writer opened")
            return call, first.opened

        writer._call, opened = await client.route((namespace, name), attempt)
        writer.epoch, writer.next_sequence = opened.writer_epoch, opened.next_sequence
        writer._responses = asyncio.ensure_future(writer._read_responses())
        return writer

    async def append(self, record: bytes) -> Position:
        """Append one record; returns its position once the ack quorum of bookies has it."""
        return (await self.append_batch([record]))[0]

    async def append_batch(self, records) -> list[Position]:
        """Append the records as one entry (a record set); returns their positions, in order."""
        records = records_of(records)
        await self._slots.acquire()
        try:
            if self._error is not None:
                raise self._error
            future = asyncio.get_running_loop().create_future()
            refused = None
            async with self._write_lock:
                if self._error is not None:  # ended while this append waited for the lock: it must not write
                    raise self._error
                self._request_id += 1
                self._pending.append((self._request_id, future))
                try:
                    await self._call.write(pb.WriteRequest(append=pb.AppendRequest(request_id=self._request_id,
                                                                                   records=records)))
                except (grpc.RpcError, asyncio.InvalidStateError) as exc:
                    refused = exc
            if refused is not None:
                # The broker ended the stream: the error it named (WriterFenced, ...) is the answer, and the
                # response reader is about to see it (outside the lock: the reader may need it to half-close).
                await asyncio.wait([self._responses], timeout=self.client.timeout_s)
                self._fail(StreamUnavailable(f"the write stream is closed: {type(refused).__name__}"))
            first, count = await future
        finally:
            self._slots.release()
        return [Position(first.ledger_id, first.entry_id, first.slot + i) for i in range(count)]

    async def _read_responses(self) -> None:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    self._fail(StreamUnavailable(f"the broker ended the write stream of {self.namespace}/{self.name}"))
                    return
                if response.WhichOneof("kind") == "ended":
                    ended = response.ended
                    # (A code this client does not know leaves the answer to the status.)
                    if (error := error_of(ended.code, ended.message, ended.redirect)) is not None:
                        self._fail(error)
                    # The broker sends the status once this half-close reaches it, so no write of ours is in flight
                    # when it arrives; reading on collects that status.
                    await self._half_close()
                    continue
                appended = response.appended
                request_id, future = self._pending.popleft()
                if not future.done():
                    future.set_result((appended.first_position, appended.count))
                self.next_sequence = appended.first_sequence + appended.count
        except grpc.RpcError as exc:
            self._fail(from_rpc_error(exc))
        except asyncio.CancelledError:
            self._fail(StreamUnavailable("the writer was closed"))
            raise

    def _fail(self, error: StreamError) -> None:
        if self._error is None:
            self._error = error
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(self._error)

    async def _half_close(self) -> None:
        try:
            async with self._write_lock:
                await self._call.done_writing()
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass

    async def close(self) -> None:
        """Stop writing (appends already answered stay; pending ones fail)."""
        if self._call is not None:
            await self._half_close()
            self._call.cancel()
        if self._responses is not None:
            self._responses.cancel()
            try:
                await self._responses
            except asyncio.CancelledError:
                pass

    async def __aenter__(self) -> "StreamWriter":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
