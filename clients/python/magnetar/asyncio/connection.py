"""One client connection to a broker: the asyncio side of a PulsarSession (magnetar.protocol.session).

The session decides (handshake, which response answers which request, when
to PING or give the broker up); this wrapper does the I/O: it feeds received
bytes in, routes the events to request futures and to the producer and
consumer handlers (a broker-side close makes the handler reconnect), and
writes what the session encodes.
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.errors import ConnectError, MagnetarError, Timeout, for_code
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import ProtocolError, ProtocolViolation
from magnetar.protocol.frames import command
from magnetar.protocol.session import Connected, ConnectRefused, KeepAlive, PulsarSession, Response, Role

log = logging.getLogger(__name__)
T = pb.BaseCommand
CLIENT_VERSION = "magnetar-python 0.1"
PROTOCOL_VERSION = 20


class Connection(asyncio.Protocol):
    def __init__(self, address: str, operation_timeout_s: float, keep_alive_s: float = 30.0):
        self.address = address
        self.operation_timeout_s = operation_timeout_s
        self.session = PulsarSession(Role.CLIENT, keep_alive_s=keep_alive_s)
        self.transport: asyncio.Transport | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.producers: dict[int, object] = {}  # producer_id -> handler with on_receipt/on_send_error/on_connection_lost
        self.consumers: dict[int, object] = {}  # consumer_id -> handler with on_message/on_connection_lost
        self._pending: dict[int, asyncio.Future] = {}
        self._connected: asyncio.Future | None = None
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
        self.session.note_alive()
        self._keep_alive = loop.call_later(self.session.keep_alive_s, self._keep_alive_tick)

    def _keep_alive_tick(self) -> None:
        if self.closed:
            return
        action = self.session.keep_alive()
        if action is KeepAlive.DEAD:
            log.warning("no traffic from %s for %.0f s: closing the connection", self.address, self.session.idle_s())
            self.close()
            return
        if action is KeepAlive.PING:
            self.write(T.PING, ping=pb.CommandPing())
        self._keep_alive = asyncio.get_running_loop().call_later(self.session.keep_alive_s, self._keep_alive_tick)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.receive_data(data)
        except ProtocolError as exc:
            log.warning("closing connection to %s: %s", self.address, exc)
            self.close()
            return
        while True:
            try:
                event = self.session.next_event()
            except ProtocolViolation as exc:  # e.g. a late answer to a request given up on: skip that frame only
                log.debug("ignoring a frame from %s: %s", self.address, exc)
                continue
            if event is None:
                return
            self._dispatch(event)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.session.close()
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

    def _dispatch(self, event) -> None:
        if type(event) is Response:
            fut = self._pending.pop(event.request_id, None)
            if fut is not None and not fut.done():
                if event.type == T.ERROR:
                    fut.set_exception(for_code(event.body.error, event.body.message))
                else:
                    fut.set_result(event.body)
            return
        if type(event) is Connected:
            if event.frame.command.connected.HasField("max_message_size"):
                self.max_message_size = event.frame.command.connected.max_message_size
            if self._connected is not None and not self._connected.done():
                self._connected.set_result(None)
            return
        if type(event) is ConnectRefused:
            if self._connected is not None and not self._connected.done():
                self._connected.set_exception(for_code(event.error, event.message))
            return
        frame = event
        cmd = frame.command
        t = cmd.type
        if t == T.MESSAGE:
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
        elif t != T.ACTIVE_CONSUMER_CHANGE and t != T.PONG:
            log.debug("ignoring %s from %s", T.Type.Name(t), self.address)

    # ---- outbound -----------------------------------------------------------------

    def write(self, type_, **fields) -> None:
        if self.closed or self.transport is None:
            raise ConnectError(f"connection to {self.address} is closed")
        self.transport.write(self.session.send(command(type_, **fields)))

    def write_with_payload(self, cmd, headers_and_payload: bytes) -> None:
        if self.closed or self.transport is None:
            raise ConnectError(f"connection to {self.address} is closed")
        self.transport.write(self.session.send(cmd, headers_and_payload))

    def next_request_id(self) -> int:
        return self.session.next_request_id()

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
            if self._pending.pop(body.request_id, None) is not None:
                self.session.abandon(body.request_id)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.session.close()
            self.transport.close()


__all__ = ["Connection", "MagnetarError"]
