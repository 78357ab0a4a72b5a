"""One client connection to a broker: CONNECT handshake, request/response by request id, routing to handlers.

The asyncio side is thin: bytes go into the shared pure codec (magnetar.protocol)
and each decoded command is either the answer to a pending request (by
request id), a receipt/error for a producer, a message for a consumer, or a
broker-side close of a producer/consumer (the handler reconnects).
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from magnetar.errors import ConnectError, MagnetarError, Timeout, for_code
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import FrameDecoder, command, encode_command, encode_message, field_for_type

log = logging.getLogger(__name__)
T = pb.BaseCommand
CLIENT_VERSION = "magnetar-python 0.1"
PROTOCOL_VERSION = 20

# Responses and the field holding their request id; errors inside responses are handled per type.
_RESPONSES = {
    T.SUCCESS, T.ERROR, T.PRODUCER_SUCCESS, T.LOOKUP_RESPONSE, T.PARTITIONED_METADATA_RESPONSE,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE,
}


class Connection(asyncio.Protocol):
    def __init__(self, address: str, operation_timeout_s: float, keep_alive_s: float = 30.0):
        self.address = address
        self.operation_timeout_s = operation_timeout_s
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.producers: dict[int, object] = {}  # producer_id -> handler with on_receipt/on_send_error/on_closed_by_broker
        self.consumers: dict[int, object] = {}  # consumer_id -> handler with on_message/on_closed_by_broker
        self._pending: dict[int, asyncio.Future] = {}
        self._connected: asyncio.Future | None = None
        self._request_ids = itertools.count()
        self.keep_alive_s = keep_alive_s
        self._last_received = 0.0
        self._keep_alive: asyncio.TimerHandle | None = None
        self.closed = False

    @classmethod
    async def open(cls, address: str, operation_timeout_s: float) -> "Connection":
        host, _, port = address.partition(":")
        loop = asyncio.get_running_loop()
        conn = cls(address, operation_timeout_s)
        conn._connected = loop.create_future()
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, host, int(port)), operation_timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {address}: {exc}") from exc
        conn.write(T.CONNECT, connect=pb.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION))
        try:
            await asyncio.wait_for(asyncio.shield(conn._connected), operation_timeout_s)
        except asyncio.TimeoutError as exc:
            conn.close()
            raise Timeout(f"no CONNECTED from {address}") from exc
        return conn

    # ---- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        loop = asyncio.get_running_loop()
        self._last_received = loop.time()
        self._keep_alive = loop.call_later(self.keep_alive_s, self._keep_alive_tick)

    def _keep_alive_tick(self) -> None:
        """PING when idle; a broker silent for two intervals is presumed gone (handlers reconnect)."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        idle = loop.time() - self._last_received
        if idle >= 2 * self.keep_alive_s:
            log.warning("no traffic from %s for %.0f s: closing the connection", self.address, idle)
            self.close()
            return
        if idle >= self.keep_alive_s:
            self.write(T.PING, ping=pb.CommandPing())
        self._keep_alive = loop.call_later(self.keep_alive_s, self._keep_alive_tick)

    def data_received(self, data: bytes) -> None:
        self._last_received = asyncio.get_running_loop().time()
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection to %s: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            self._dispatch(frame)

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._keep_alive is not None:
            self._keep_alive.cancel()
        err = ConnectError(f"connection to {self.address} lost")
        if self._connected is not None and not self._connected.done():
            self._connected.set_exception(err)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        for handler in list(self.producers.values()) + list(self.consumers.values()):
            handler.on_connection_lost(self)

    # ---- inbound ------------------------------------------------------------------

    def _dispatch(self, frame) -> None:
        cmd = frame.command
        t = cmd.type
        if t == T.CONNECTED:
            if cmd.connected.HasField("max_message_size"):
                self.max_message_size = cmd.connected.max_message_size
            if not self._connected.done():
                self._connected.set_result(None)
        elif t == T.ERROR and not self._connected.done():
            self._connected.set_exception(for_code(cmd.error.error, cmd.error.message))
        elif t in _RESPONSES:
            body = getattr(cmd, field_for_type(t))
            if t == T.PRODUCER_SUCCESS and not body.producer_ready:
                return  # WaitForExclusive: queued by the broker; the real answer follows
            fut = self._pending.pop(body.request_id, None)
            if fut is not None and not fut.done():
                if t == T.ERROR:
                    fut.set_exception(for_code(body.error, body.message))
                else:
                    fut.set_result(body)
        elif t == T.MESSAGE:
            handler = self.consumers.get(cmd.message.consumer_id)
            if handler is not None:
                handler.on_message(cmd.message, frame)
        elif t in (T.SEND_RECEIPT, T.SEND_ERROR):
            body = cmd.send_receipt if t == T.SEND_RECEIPT else cmd.send_error
            handler = self.producers.get(body.producer_id)
            if handler is not None:
                (handler.on_receipt if t == T.SEND_RECEIPT else handler.on_send_error)(body)
        elif t == T.CLOSE_PRODUCER:
            handler = self.producers.pop(cmd.close_producer.producer_id, None)
            if handler is not None:
                handler.on_connection_lost(self)
        elif t == T.CLOSE_CONSUMER:
            handler = self.consumers.pop(cmd.close_consumer.consumer_id, None)
            if handler is not None:
                handler.on_connection_lost(self)
        elif t == T.PING:
            self.write(T.PONG, pong=pb.CommandPong())
        elif t == T.ACTIVE_CONSUMER_CHANGE or t == T.PONG:
            pass
        else:
            log.debug("ignoring %s from %s", T.Type.Name(t), self.address)

    # ---- outbound -----------------------------------------------------------------

    def write(self, type_, **fields) -> None:
        if self.closed or self.transport is None:
            raise ConnectError(f"connection to {self.address} is closed")
        self.transport.write(encode_command(command(type_, **fields)))

    def write_with_payload(self, cmd, headers_and_payload: bytes) -> None:
        if self.closed or self.transport is None:
            raise ConnectError(f"connection to {self.address} is closed")
        self.transport.write(encode_message(cmd, headers_and_payload))

    def next_request_id(self) -> int:
        return next(self._request_ids)

    async def request(self, type_, field: str, body) -> object:
        """Send a command carrying ``body.request_id`` and wait for its answer. Raises the mapped MagnetarError."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[body.request_id] = fut
        try:
            self.write(type_, **{field: body})
            return await asyncio.wait_for(fut, self.operation_timeout_s)
        except asyncio.TimeoutError as exc:
            raise Timeout(f"{T.Type.Name(type_)} to {self.address} timed out") from exc
        finally:
            self._pending.pop(body.request_id, None)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()


__all__ = ["Connection", "MagnetarError"]
