"""The asyncio Stream API client: namespaces, streams, a fenced writer and tailing readers, over gRPC.

``StreamClient("host:port[,host:port...]")`` talks to any broker's Stream
API. A stream is served by the broker that owns its bundle: an RPC that lands
elsewhere ends with NotOwner and the owner's address, which the client
follows (and remembers per stream). A broker that cannot be reached is
skipped for the next address of the list until ``timeout_s`` runs out, so a
killed broker's streams are found again once a live broker has taken them.

A writer (``open_writer``) is one gRPC stream: appends are pipelined and
answered in order; once another writer opened the stream its next append
raises WriterFenced. A writer whose broker went away raises
StreamUnavailable and must be opened again. A reader (``open_reader``)
resumes by itself after the record it delivered last, on whichever broker
serves the stream then, so it delivers every record once, in order.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from typing import NamedTuple, Sequence

import grpc

from magnetar.auth import Authentication, AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams import stream_api_pb2_grpc as pb_grpc
from magnetar.streams.errors import (
    AUTHORITATIVE_KEY, InvalidStreamRequest, NotOwner, StreamError, StreamUnavailable, from_rpc_error,
)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 1.0


class Position(NamedTuple):
    """A record's position: (ledger, entry, slot in the entry's record set), ordered."""

    ledger_id: int
    entry_id: int
    slot: int = 0

    @classmethod
    def from_pb(cls, p: pb.Position) -> "Position":
        return cls(p.ledger_id, p.entry_id, p.slot)

    def to_pb(self) -> pb.Position:
        return pb.Position(ledger_id=self.ledger_id, entry_id=self.entry_id, slot=self.slot)


class Record(NamedTuple):
    position: Position
    sequence: int
    data: bytes
    publish_time_s: float


EARLIEST = "earliest"
LATEST = "latest"


@dataclasses.dataclass(frozen=True)
class StreamInfo:
    namespace: str
    stream: str
    first_position: Position
    last_position: Position | None
    next_position: Position
    first_sequence: int
    next_sequence: int
    size_bytes: int
    ledgers: list[dict]
    truncated_before: Position | None
    writer_epoch: int
    policies: dict

    @classmethod
    def from_pb(cls, m: pb.StreamInfo) -> "StreamInfo":
        def pos(field):
            return Position.from_pb(getattr(m, field)) if m.HasField(field) else None
        return cls(m.namespace, m.stream, pos("first_position"), pos("last_position"), pos("next_position"),
                   m.first_sequence, m.next_sequence, m.size_bytes,
                   [{"ledger_id": l.ledger_id, "entries": l.entries, "size_bytes": l.size_bytes,
                     "created_s": l.created_s} for l in m.ledgers],
                   pos("truncated_before"), m.writer_epoch, _policies(m.policies))


def _policies(p: pb.NamespacePolicies) -> dict:
    return {
        "ensemble_size": p.placement.ensemble_size, "write_quorum": p.placement.write_quorum,
        "ack_quorum": p.placement.ack_quorum, "min_zones": p.placement.min_zones,
        "rolling_max_entries": p.rolling.max_entries, "rolling_max_bytes": p.rolling.max_bytes,
        "rolling_max_age_s": p.rolling.max_age_s, "retention_time_s": p.retention.time_s,
        "retention_size_bytes": p.retention.size_bytes,
    }


def _rolling(max_entries, max_bytes, max_age_s) -> pb.RollingPolicy | None:
    if max_entries is None and max_bytes is None and max_age_s is None:
        return None
    return pb.RollingPolicy(max_entries=max_entries, max_bytes=max_bytes, max_age_s=max_age_s)


def _retention(time_s, size_bytes) -> pb.RetentionPolicy | None:
    if time_s is None and size_bytes is None:
        return None
    return pb.RetentionPolicy(time_s=time_s, size_bytes=size_bytes)


def _channel_credentials(auth: Authentication | None, trust_path: str | None) -> grpc.ChannelCredentials:
    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise InvalidStreamRequest(f"cannot read {path}: {exc.strerror}") from None

    cert = auth.client_certificate() if isinstance(auth, AuthenticationTLS) else None
    return grpc.ssl_channel_credentials(root_certificates=read(trust_path),
                                        private_key=read(cert[1]) if cert else None,
                                        certificate_chain=read(cert[0]) if cert else None)


def parse_addresses(address: str) -> list[str]:
    """``host:port[,host:port...]`` (an optional ``grpc://`` prefix); raises InvalidStreamRequest."""
    text = address.removeprefix("grpc://") if isinstance(address, str) else ""
    out = [a.strip() for a in text.split(",") if a.strip()]
    for a in out:
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidStreamRequest(f"invalid stream address {a!r}: expected host:port")
    if not out:
        raise InvalidStreamRequest(f"invalid stream address {address!r}: expected host:port[,host:port...]")
    return out


def authorization_metadata(auth: Authentication | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` metadata every call carries: ``Bearer <token>`` (AuthenticationToken; a supplier is
    called per call, so a refreshed token is used) or ``Basic <base64 user:password>`` (AuthenticationBasic).
    AuthenticationTLS is the channel's client certificate instead. Raises InvalidStreamRequest for anything else."""
    if auth is None or isinstance(auth, AuthenticationTLS):
        return ()
    if isinstance(auth, AuthenticationToken):
        return (("authorization", "Bearer " + auth.auth_data().decode()),)
    if isinstance(auth, AuthenticationBasic):
        return (("authorization", "Basic " + base64.b64encode(auth.auth_data()).decode()),)
    raise InvalidStreamRequest(f"unsupported authentication {type(auth).__name__}: use AuthenticationToken, "
                               "AuthenticationBasic or AuthenticationTLS")


class StreamClient:
    """See the module docstring. Every method raises a StreamError subclass (magnetar.streams.errors).

    ``authentication``: as the Pulsar client's (``AuthenticationToken``, ``AuthenticationBasic``,
    ``AuthenticationTLS``). ``use_tls`` (or a ``grpcs://`` address) dials the brokers over TLS, trusting
    ``tls_trust_certs_file_path`` (else the system's roots)."""

    def __init__(self, address: str, *, timeout_s: float = 30.0, authentication: Authentication | None = None,
                 use_tls: bool = False, tls_trust_certs_file_path: str | None = None):
        if authentication is not None and not isinstance(authentication, Authentication):
            raise InvalidStreamRequest(f"authentication must be a magnetar Authentication, not "
                                       f"{type(authentication).__name__}")
        self.use_tls = use_tls or (isinstance(address, str) and address.startswith("grpcs://"))
        if isinstance(address, str):
            address = address.removeprefix("grpcs://")
        self.addresses = parse_addresses(address)
        self.timeout_s = timeout_s
        self.authentication = authentication
        authorization_metadata(authentication)  # refuse an unsupported kind now, not on the first call
        self._credentials = _channel_credentials(authentication, tls_trust_certs_file_path) if self.use_tls else None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._owners: dict[tuple[str, str], str] = {}
        self._next = 0
        self._closed = False

    async def __aenter__(self) -> "StreamClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def stub(self, address: str) -> pb_grpc.StreamServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                       ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address, options=options)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials, options=options)
            self._channels[address] = channel
        return pb_grpc.StreamServiceStub(channel)

    def _home(self) -> str:
        return self.addresses[self._next % len(self.addresses)]

    def _failed(self, address: str) -> None:
        if self._home() == address:
            self._next += 1

    async def route(self, key: tuple[str, str] | None, attempt):
        """Run ``attempt(stub, metadata)`` on the stream's broker: follows redirects, and on a broker that cannot
        be reached tries the next address, until ``timeout_s``."""
        if self._closed:
            raise StreamUnavailable("the stream client is closed")
        deadline = time.monotonic() + self.timeout_s
        address = self._owners.get(key) if key else None
        authoritative = False
        delay = _RETRY_FIRST_S
        while True:
            address = address or self._home()
            metadata = ((AUTHORITATIVE_KEY, "true"),) if authoritative else ()
            metadata += authorization_metadata(self.authentication)
            try:
                result = await attempt(self.stub(address), metadata)
                if key:
                    self._owners[key] = address
                return result
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            except StreamError as exc:
                error = exc
            if not error.retriable or time.monotonic() >= deadline:
                raise error
            if isinstance(error, NotOwner) and error.redirect:
                address, authoritative = error.redirect, True
                continue  # a redirect is an answer, not a failure: follow it at once
            if key:
                self._owners.pop(key, None)
            self._failed(address)
            address, authoritative = None, False
            await asyncio.sleep(delay)  # backoff between attempts on brokers that failed, not synchronisation
            delay = min(delay * 2, _RETRY_MAX_S)

    async def _unary(self, method: str, request, key=None):
        return await self.route(key, lambda stub, md: getattr(stub, method)(request, metadata=md, timeout=self.timeout_s))

    # ---- namespaces -----------------------------------------------------------------

    async def create_namespace(self, name: str, *, ensemble_size: int = 0, write_quorum: int = 0, ack_quorum: int = 0,
                               min_zones: int = 0, rolling_max_entries: int | None = None,
                               rolling_max_bytes: int | None = None, rolling_max_age_s: float | None = None,
                               retention_time_s: float | None = None, retention_size_bytes: int | None = None) -> dict:
        """A namespace (``tenant/ns``, or ``ns`` for ``public/ns``) with its placement and default rolling and
        retention policies (0 / None = the broker's default). Returns its effective policies."""
        policies = pb.NamespacePolicies(
            placement=pb.PlacementPolicy(ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=ack_quorum,
                                         min_zones=min_zones),
            rolling=_rolling(rolling_max_entries, rolling_max_bytes, rolling_max_age_s),
            retention=_retention(retention_time_s, retention_size_bytes))
        info = await self._unary("CreateNamespace", pb.CreateNamespaceRequest(namespace=name, policies=policies))
        return _policies(info.policies)

    async def get_namespace(self, name: str) -> dict:
        return _policies((await self._unary("GetNamespace", pb.NamespaceRequest(namespace=name))).policies)

    async def list_namespaces(self, tenant: str = "public") -> list[str]:
        return list((await self._unary("ListNamespaces", pb.NamespaceRequest(namespace=tenant))).namespaces)

    async def delete_namespace(self, name: str) -> None:
        await self._unary("DeleteNamespace", pb.NamespaceRequest(namespace=name))

    # ---- streams --------------------------------------------------------------------

    async def create_stream(self, namespace: str, name: str, *, rolling_max_entries: int | None = None,
                            rolling_max_bytes: int | None = None, rolling_max_age_s: float | None = None,
                            retention_time_s: float | None = None,
                            retention_size_bytes: int | None = None) -> StreamInfo:
        """A stream; the policies given override its namespace's."""
        request = pb.CreateStreamRequest(
            namespace=namespace, stream=name, rolling=_rolling(rolling_max_entries, rolling_max_bytes, rolling_max_age_s),
            retention=_retention(retention_time_s, retention_size_bytes))
        await self._unary("CreateStream", request)  # any broker creates it: never redirected, never repeated
        return await self.get_info(namespace, name)

    async def delete_stream(self, namespace: str, name: str) -> None:
        await self._unary("DeleteStream", pb.StreamRequest(namespace=namespace, stream=name), (namespace, name))
        self._owners.pop((namespace, name), None)

    async def list_streams(self, namespace: str) -> list[str]:
        return list((await self._unary("ListStreams", pb.NamespaceRequest(namespace=namespace))).streams)

    async def get_info(self, namespace: str, name: str) -> StreamInfo:
        """First and last position, size, ledgers, sequence numbers, truncation point."""
        return StreamInfo.from_pb(await self._unary("GetStreamInfo", pb.StreamRequest(namespace=namespace, stream=name),
                                                    (namespace, name)))

    async def truncate(self, namespace: str, name: str, before: Position) -> StreamInfo:
        """Make every record before ``before`` unreadable; whole ledgers before it are deleted."""
        request = pb.TruncateRequest(namespace=namespace, stream=name, before=Position(*before).to_pb())
        return StreamInfo.from_pb(await self._unary("Truncate", request, (namespace, name)))

    async def open_writer(self, namespace: str, name: str) -> "StreamWriter":
        """The stream's only writer: opening it fences the previous one."""
        from magnetar.streams.writer import StreamWriter

        return await StreamWriter.open(self, namespace, name)

    def open_reader(self, namespace: str, name: str, start=EARLIEST, *, max_records_per_batch: int = 0) -> "StreamReader":
        """An async iterator of Records from ``start`` (EARLIEST, LATEST, a Position or a sequence number) on,
        waiting at the end for new ones. Raises PositionTruncated when ``start`` was truncated."""
        from magnetar.streams.reader import StreamReader

        return StreamReader(self, namespace, name, start, max_records_per_batch)


def records_of(records: Sequence[bytes]) -> list[bytes]:
    out = []
    for r in records:
        if not isinstance(r, (bytes, bytearray, memoryview)):
            raise InvalidStreamRequest(f"a record is bytes, got {type(r).__name__}")
        out.append(bytes(r))
    if not out:
        raise InvalidStreamRequest("an append needs at least one record")
    return out


__all__ = ["EARLIEST", "LATEST", "Position", "Record", "StreamClient", "StreamInfo"]
