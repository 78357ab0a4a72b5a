"""StreamReader: a tailing reader of a stream, as a gRPC server stream of record batches.

It delivers records in order and without gaps. When its broker goes away or
the stream moves, it opens the read again, on whichever broker serves the
stream then, from just after the last record it delivered (a position, so
nothing is delivered twice). Errors that are answers (PositionTruncated,
StreamNotFound, ...) end the iteration by being raised.
"""

from __future__ import annotations

import collections

import grpc

from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams.client import EARLIEST, LATEST, Position, Record
from magnetar.streams.errors import START_KEY, InvalidStreamRequest, StreamUnavailable, from_rpc_error


class StreamReader:
    def __init__(self, client, namespace: str, name: str, start, max_records_per_batch: int = 0):
        if not (start in (EARLIEST, LATEST) or isinstance(start, (Position, tuple))
                or (isinstance(start, int) and not isinstance(start, bool))):
            raise InvalidStreamRequest(f"a reader starts at EARLIEST, LATEST, a Position or a sequence number, not {start!r}")
        self.client = client
        self.namespace = namespace
        self.name = name
        self._start = start
        self._max = max_records_per_batch
        self._call = None
        self._buffer: collections.deque[Record] = collections.deque()
        self.last_position: Position | None = None
        self._closed = False

    def _request(self) -> pb.ReadRequest:
        request = pb.ReadRequest(namespace=self.namespace, stream=self.name, max_records_per_batch=self._max)
        if self.last_position is not None:  # resume after the last record delivered
            p = self.last_position
            request.position.CopyFrom(Position(p.ledger_id, p.entry_id, p.slot + 1).to_pb())
        elif self._start == EARLIEST:
            request.earliest = True
        elif self._start == LATEST:
            request.latest = True
        elif isinstance(self._start, tuple):
            request.position.CopyFrom(Position(*self._start).to_pb())
        else:
            request.sequence = self._start
        return request

    async def open(self) -> "StreamReader":
        """Open the read now (it opens with the first ``read_batch`` otherwise): a LATEST reader then sees every
        record appended after this returns. Raises what the start position gets (PositionTruncated, ...)."""
        if self._call is None and not self._closed:
            self._call = await self.client.route((self.namespace, self.name), self._open)
        return self

    async def read_batch(self) -> list[Record]:
        """The next batch of records (waits for one when the reader is at the end)."""
        if self._buffer:
            out = list(self._buffer)
            self._buffer.clear()
            return out
        while True:
            if self._closed:
                raise StopAsyncIteration
            await self.open()
            try:
                batch = await self._call.read()
            except grpc.RpcError as exc:
                self._call = None
                error = from_rpc_error(exc)
                if not error.retriable or self._closed:
                    raise error from None
                continue
            if batch is grpc.aio.EOF:
                self._call = None
                continue
            if batch.records:
                records = [Record(Position.from_pb(r.position), r.sequence, r.data, r.publish_time_s)
                           for r in batch.records]
                self.last_position = records[-1].position
                return records

    async def _open(self, stub, metadata):
        """Open the read; the server sends its initial metadata once it serves the stream from a valid start,
        so a redirect or a refused start surfaces here (where ``route`` follows or raises it), even for a reader
        at the end that has no batch to show yet."""
        call = stub.Read(self._request(), metadata=metadata)
        try:
            start = dict(await call.initial_metadata() or ()).get(START_KEY)
            if start and self.last_position is None:  # a reconnect resumes here, not at a new LATEST or sequence
                self._start = Position(*(int(x) for x in start.split(":")))
            if call.done():
                await call.read()  # raises the RpcError the call ended with
                raise StreamUnavailable("the read ended before its first batch")
        except BaseException:
            call.cancel()
            raise
        return call

    @property
    def start(self):
        """Where the reader starts: as given, or once open the Position the broker resolved it to."""
        return self._start

    def __aiter__(self) -> "StreamReader":
        return self

    async def __anext__(self) -> Record:
        if not self._buffer:
            self._buffer.extend(await self.read_batch())
        return self._buffer.popleft()

    async def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def __aenter__(self) -> "StreamReader":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

