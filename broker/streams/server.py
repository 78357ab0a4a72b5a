"""The Stream API's gRPC server (grpc.aio) on ``stream_port``: the protocol side of broker/streams/service.py.

Every handler runs its work through ``_answer``, the one place where the
broker's errors become a gRPC status plus the ``magnetar-error`` code (and
``magnetar-redirect`` for NotOwner) that the client turns back into a class.
Writes are one bidirectional stream per writer: the first request opens the
writer (fencing the previous one), each later request is one append; up to
``MAX_APPENDS_IN_FLIGHT`` appends are pipelined to the bookies and answered in
order, and beyond that the server stops reading the writer's requests (HTTP/2
flow control pushes back). An error that ends an open write stream goes to a
client that asked (``magnetar-end-notice``) in-band first, and the status only
after its half-close: grpcio's aio client reports its own INTERNAL instead of
the status when one of its writes is in flight as the call ends. Reads are a
server stream of record batches that never ends by itself: a reader at the
end waits for the next append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from broker.errors import BrokerError
from broker.streams.errors import StreamApiError, invalid, placement_refusal
from broker.streams.policies import namespace_policies_from_pb, parse_namespace
from broker.streams.security import StreamSecurity, server_credentials
from broker.streams.service import StreamService
from broker.streams.stream import DEFAULT_RECORDS_PER_BATCH, MAX_RECORDS_PER_BATCH, StreamPosition
from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams import stream_api_pb2_grpc as pb_grpc
from magnetar.streams.errors import AUTHORITATIVE_KEY, END_NOTICE_KEY, START_KEY, trailing_metadata
from storage.errors import StorageError

log = logging.getLogger(__name__)

MAX_APPENDS_IN_FLIGHT = 1000  # per writer
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a gRPC message: an append of a max-size entry, or a read batch, fits
MAX_CONCURRENT_RPCS = 10_000  # writers, readers and calls at once; beyond it RESOURCE_EXHAUSTED (TooManyRequests)
END_NOTICE_DRAIN_S = 5.0  # how long a write stream that sent its `ended` notice waits for the client's half-close


def _position(p: StreamPosition | None) -> pb.Position | None:
    return None if p is None else pb.Position(ledger_id=p.ledger_id, entry_id=p.entry_id, slot=p.slot)


def _stream_error(exc: BaseException) -> StreamApiError:
    if isinstance(exc, StreamApiError):
        return exc
    if (refusal := placement_refusal("the bookies cannot place a new ledger", exc)) is not None:
        return refusal
    if isinstance(exc, (StorageError, BrokerError)):
        return StreamApiError("StreamUnavailable", f"{type(exc).__name__}: {exc}")
    return StreamApiError("StreamUnavailable", f"internal error: {type(exc).__name__}: {exc}")


async def _abort(context, exc: BaseException):
    error = _stream_error(exc)
    if not isinstance(exc, StreamApiError):
        log.warning("stream API: %s", error)
    await context.abort(error.status, str(error), trailing_metadata=trailing_metadata(error))


def _authoritative(context) -> bool:
    return any(k == AUTHORITATIVE_KEY and v == "true" for k, v in (context.invocation_metadata() or ()))


def _wants_end_notice(context) -> bool:
    return any(k == END_NOTICE_KEY and v == "true" for k, v in (context.invocation_metadata() or ()))


class StreamServicer(pb_grpc.StreamServiceServicer):
    def __init__(self, service: StreamService):
        self.service = service
        self.security = StreamSecurity(service.broker)

    async def _answer(self, context, work):
        try:
            return await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the boundary: every error becomes a status
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await _abort(context, exc)

    # ---- namespaces ----------------------------------------------------------------

    async def CreateNamespace(self, request, context):
        async def work():
            await self.security.authorize(context, "CreateNamespace", request.namespace)
            policies = namespace_policies_from_pb(request.policies, self.service.defaults())
            ns, policies = await self.service.create_namespace(request.namespace, policies)
            return pb.NamespaceInfo(namespace=str(ns), policies=policies.to_pb())
        return await self._answer(context, work())

    async def GetNamespace(self, request, context):
        async def work():
            await self.security.authorize(context, "GetNamespace", request.namespace)
            ns = parse_namespace(request.namespace)
            return pb.NamespaceInfo(namespace=str(ns), policies=(await self.service.namespace_policies(ns)).to_pb())
        return await self._answer(context, work())

    async def ListNamespaces(self, request, context):
        async def work():
            await self.security.authorize(context, "ListNamespaces", request.namespace)
            return pb.ListNamespacesResponse(namespaces=await self.service.list_namespaces(request.namespace or "public"))
        return await self._answer(context, work())

    async def DeleteNamespace(self, request, context):
        async def work():
            await self.security.authorize(context, "DeleteNamespace", request.namespace)
            ns, policies = await self.service.delete_namespace(request.namespace)
            return pb.NamespaceInfo(namespace=str(ns), policies=policies.to_pb())
        return await self._answer(context, work())

    # ---- streams -----------------------------------------------------------------------

    async def CreateStream(self, request, context):
        async def work():
            await self.security.authorize(context, "CreateStream", request.namespace)
            # Any broker creates the document; answering with positions would need the owner, and a client that
            # followed a redirect would then create it twice. So: names and effective policies only.
            ns, name = await self.service.create_stream(request.namespace, request.stream,
                                                        request.rolling if request.HasField("rolling") else None,
                                                        request.retention if request.HasField("retention") else None)
            policies = await self.service.stream_policies(ns, name)
            return pb.StreamInfo(namespace=str(ns), stream=name, policies=policies.to_pb())
        return await self._answer(context, work())

    async def DeleteStream(self, request, context):
        async def work():
            await self.security.authorize(context, "DeleteStream", request.namespace)
            await self.service.delete_stream(request.namespace, request.stream, authoritative=_authoritative(context))
            return request
        return await self._answer(context, work())

    async def ListStreams(self, request, context):
        async def work():
            await self.security.authorize(context, "ListStreams", request.namespace)
            return pb.ListStreamsResponse(streams=await self.service.list_streams(request.namespace))
        return await self._answer(context, work())

    async def GetStreamInfo(self, request, context):
        async def work():
            await self.security.authorize(context, "GetStreamInfo", request.namespace)
            return await self._info(request.namespace, request.stream, context)
        return await self._answer(context, work())

    async def Truncate(self, request, context):
        async def work():
            await self.security.authorize(context, "Truncate", request.namespace)
            stream = await self.service.stream(request.namespace, request.stream, authoritative=_authoritative(context))
            if not request.HasField("before"):
                raise invalid("truncate needs a position (before)")
            b = request.before
            await stream.truncate(StreamPosition(b.ledger_id, b.entry_id, b.slot))
            return await self._info(request.namespace, request.stream, context)
        return await self._answer(context, work())

    async def _info(self, namespace: str, name: str, context) -> pb.StreamInfo:
        stream = await self.service.stream(namespace, name, authoritative=_authoritative(context))
        info = await stream.info()
        return pb.StreamInfo(
            namespace=str(stream.ns), stream=stream.name, first_position=_position(info["first_position"]),
            last_position=_position(info["last_position"]), next_position=_position(info["next_position"]),
            first_sequence=info["first_sequence"], next_sequence=info["next_sequence"], size_bytes=info["size_bytes"],
            ledgers=[pb.LedgerInfo(ledger_id=l["ledger_id"], entries=l["entries"], size_bytes=l["size"],
                                   created_s=l["timestamp"]) for l in info["ledgers"]],
            truncated_before=_position(info["truncated_before"]), policies=stream.policies.to_pb(),
            writer_epoch=info["writer_epoch"])

    # ---- writes ---------------------------------------------------------------------------

    async def Write(self, request_iterator, context):
        pump = None
        ending = asyncio.Event()  # set once the stream has failed: the pump then appends nothing more
        try:
            role = await self.security.role(context)  # before reading anything the caller sends
            first = await anext(request_iterator, None)
            if first is None or first.WhichOneof("kind") != "open":
                raise invalid("a write stream starts with an open request")
            await self.security.authorize(context, "Write", first.open.namespace, role=role)
            stream = await self.service.stream(first.open.namespace, first.open.stream,
                                               authoritative=_authoritative(context))
            epoch = await stream.open_writer()
            yield pb.WriteResponse(opened=pb.WriterOpened(writer_epoch=epoch, next_sequence=stream.next_sequence,
                                                          next_position=_position(stream.next_position())))
            pending: asyncio.Queue = asyncio.Queue(MAX_APPENDS_IN_FLIGHT)
            pump = asyncio.ensure_future(self._pump(request_iterator, stream, epoch, pending, ending))
            while True:
                item = await pending.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                request_id, future, first_sequence, count = item
                position = await future
                yield pb.WriteResponse(appended=pb.AppendResult(
                    request_id=request_id, first_position=_position(position), first_sequence=first_sequence,
                    count=count))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the boundary
            if isinstance(exc, grpc.aio.AbortError):
                raise
            if pump is not None and _wants_end_notice(context):
                # The client pipelines appends: a status that reaches it while one of its writes is in flight is
                # replaced by grpcio's own INTERNAL ("Internal error from Core"), so the client learns of the error
                # in-band, stops writing and half-closes, and the status goes out after that (or after a bound).
                ending.set()
                while not pending.empty():  # a pump blocked on a full queue goes on to read (and drop) requests
                    pending.get_nowait()
                error = _stream_error(exc)
                yield pb.WriteResponse(ended=pb.WriteEnded(code=error.code_name, message=str(error),
                                                           redirect=getattr(error, "redirect", None) or ""))
                await asyncio.wait([pump], timeout=END_NOTICE_DRAIN_S)
            await _abort(context, exc)
        finally:
            if pump is not None:
                pump.cancel()

    @staticmethod
    async def _pump(request_iterator, stream, epoch: int, pending: asyncio.Queue, ending: asyncio.Event) -> None:
        try:
            async for request in request_iterator:
                if ending.is_set():
                    continue  # the stream failed: read on to the client's half-close, appending nothing
                try:
                    if request.WhichOneof("kind") != "append":
                        raise invalid("only appends follow the open request of a write stream")
                    future, first_sequence = stream.append(epoch, list(request.append.records))
                except Exception as exc:  # noqa: BLE001 -- handed to the responder, which ends the RPC with it
                    ending.set()
                    await pending.put(exc)
                    continue
                future.add_done_callback(_consume)
                await pending.put((request.append.request_id, future, first_sequence, len(request.append.records)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the request stream itself broke: handed to the responder
            if not ending.is_set():
                await pending.put(exc)
        else:
            if not ending.is_set():
                await pending.put(None)

    # ---- reads -----------------------------------------------------------------------------

    async def Read(self, request, context):
        try:
            await self.security.authorize(context, "Read", request.namespace)
            stream = await self.service.stream(request.namespace, request.stream, authoritative=_authoritative(context))
            max_records = request.max_records_per_batch or DEFAULT_RECORDS_PER_BATCH
            if not 1 <= max_records <= MAX_RECORDS_PER_BATCH:
                raise invalid(f"max_records_per_batch must be in 1..{MAX_RECORDS_PER_BATCH}, got {max_records}")
            start = await self._start(stream, request)
            batches = stream.tail(start, max_records)  # its start is fixed here, before anything else can run
            # The open succeeded; the resolved start lets a client that reconnects resume exactly there.
            await context.send_initial_metadata(((START_KEY, f"{start.ledger_id}:{start.entry_id}:{start.slot}"),))
            async for batch in batches:
                yield pb.ReadBatch(records=[
                    pb.Record(position=_position(r.position), sequence=r.sequence, data=r.data,
                              publish_time_s=r.publish_time_ms / 1000) for r in batch])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the boundary
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await _abort(context, exc)

    @staticmethod
    async def _start(stream, request) -> StreamPosition:
        kind = request.WhichOneof("start")
        if kind == "position":
            p = request.position
            start = StreamPosition(p.ledger_id, p.entry_id, p.slot)
        elif kind == "sequence":
            start = await stream.position_of_sequence(request.sequence)
        elif kind == "latest":
            start = stream.next_position()
        else:
            start = stream.first_readable()
        stream.check_readable(start)
        return start


def _consume(future: asyncio.Future) -> None:
    """A failed append the responder never awaited (the RPC ended first) is not an unhandled error."""
    if not future.cancelled():
        future.exception()


class StreamServer:
    """The gRPC server and the service behind it, started and stopped with the broker."""

    def __init__(self, server: grpc.aio.Server, service: StreamService):
        self.server = server
        self.service = service

    @classmethod
    async def start(cls, broker) -> "StreamServer":
        config = broker.config
        server = grpc.aio.server(maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS, options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.so_reuseport", 0)])
        try:
            credentials = server_credentials(config)
            bind = f"{config.host}:{config.stream_port}"
            port = server.add_insecure_port(bind) if credentials is None else server.add_secure_port(bind, credentials)
        except RuntimeError:  # grpcio's "failed to bind"
            port = 0
        if port == 0:
            raise OSError(f"cannot listen for the Stream API on {config.host}:{config.stream_port}")
        service = StreamService(broker, f"{config.advertised_address}:{port}")
        pb_grpc.add_StreamServiceServicer_to_server(StreamServicer(service), server)
        await server.start()
        try:
            await service.register()
        except BaseException:
            await server.stop(None)
            raise
        log.info("broker serving the Stream API (gRPC) on %s", service.address)
        return cls(server, service)

    @property
    def port(self) -> int:
        return int(self.service.address.rsplit(":", 1)[1])

    async def session_lost(self) -> None:
        await self.service.unload_bundle(None)
        with contextlib.suppress(StorageError):
            await self.service.register()

    async def close(self) -> None:
        await self.server.stop(1.0)
        await self.service.close()
