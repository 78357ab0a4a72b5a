"""One client connection to a broker: the asyncio side of a PulsarSession (magnetar.protocol.session).

The session decides (handshake, which response answers which request, when
to PING or give the broker up); this wrapper does the I/O: it feeds received
bytes in, hands each event to magnetar.asyncio.inbound (requests' answers,
messages, receipts, broker-side closes) and writes what the session encodes.
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.asyncio import inbound
from magnetar.asyncio.keepalive import KeepAliveTimer
from magnetar.auth import connect_command
from magnetar.errors import ConnectError, MagnetarError, Timeout
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import ProtocolError, ProtocolViolation
from magnetar.protocol.frames import command
from magnetar.protocol.session import PulsarSession, Role

log = logging.getLogger(__name__)
T = pb.BaseCommand
CLIENT_VERSION = "magnetar-python 0.1"
PROTOCOL_VERSION = 20


class Connection(asyncio.Protocol):
    def __init__(self, address: str, operation_timeout_s: float, keep_alive_s: float = 30.0, authentication=None):
        self.address = address
        self.authentication = authentication  # magnetar.auth: CONNECT's credentials, and AUTH_CHALLENGE's answer
        self.operation_timeout_s = operation_timeout_s
        self.session = PulsarSession(Role.CLIENT, keep_alive_s=keep_alive_s)
        self.transport: asyncio.Transport | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.producers: dict[int, object] = {}  # producer_id -> handler with on_receipt/on_send_error/on_connection_lost
        self.consumers: dict[int, object] = {}  # consumer_id -> handler with on_message/on_connection_lost
        self.requests = inbound.PendingRequests()
        self.handshake: asyncio.Future | None = None  # CONNECTED (or the refusal), while open() waits for it
        self._keep_alive = KeepAliveTimer(self.session, ping=lambda: self.write(T.PING, ping=pb.CommandPing()),
                                          dead=self._broker_silent)
        self.closed = False

    @classmethod
    async def open(cls, address: str, operation_timeout_s: float, *, ssl_context=None,
                   authentication=None) -> "Connection":
        """``ssl_context`` (magnetar.tls): TLS to the broker, its handshake failures raised as ConnectError."""
        host, _, port = address.partition(":")
        connect = connect_command(CLIENT_VERSION, PROTOCOL_VERSION, authentication)  # a failing supplier: no socket
        conn = cls(address, operation_timeout_s, authentication=authentication)
        conn.handshake = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.get_running_loop().create_connection(
                lambda: conn, host, int(port), ssl=ssl_context, server_hostname=host if ssl_context else None),
                operation_timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            conn.abandon_handshake()
            raise ConnectError(f"cannot connect to {address}: {exc}") from exc
        connected = False
        try:
            # The socket may already be gone: a broker (or the proxy in front of it) that accepts and closes at
            # once is seen only after create_connection returned. connection_lost then failed the handshake.
            conn.write(T.CONNECT, connect=connect)
            await asyncio.wait_for(asyncio.shield(conn.handshake), operation_timeout_s)
            connected = True
        except ConnectError as exc:
            raise ConnectError(f"cannot connect to {address}: the connection closed before the handshake") from exc
        except asyncio.TimeoutError as exc:
            raise Timeout(f"no CONNECTED from {address}") from exc
        finally:
            if not connected:
                conn.close()
                conn.abandon_handshake()
        return conn

    def abandon_handshake(self) -> None:
        """open() gave up: nobody will await the handshake, so its failure (already set, or set by a later
        connection_lost) must not reach the loop's handler as "Future exception was never retrieved"."""
        fut, self.handshake = self.handshake, None
        if fut is None:
            return
        if not fut.done():
            fut.cancel()
        elif not fut.cancelled():
            fut.exception()  # marks the failure as seen

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.session.note_alive()
        self._keep_alive.start()

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
            inbound.route(self, event)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.session.close()
        self._keep_alive.cancel()
        err = ConnectError(f"connection to {self.address} lost")
        inbound.settle(self.handshake, err)
        self.requests.fail_all(err)
        for handler in list(self.producers.values()) + list(self.consumers.values()):
            handler.on_connection_lost(self)

    def write(self, type_, **fields) -> None:
        self.write_with_payload(command(type_, **fields), None)

    def write_with_payload(self, cmd, headers_and_payload: bytes | None) -> None:
        if self.closed or self.transport is None:
            raise ConnectError(f"connection to {self.address} is closed")
        self.transport.write(self.session.send(cmd, headers_and_payload))

    def next_request_id(self) -> int:
        return self.session.next_request_id()

    async def request(self, type_, field: str, body) -> object:
        """Send a command carrying ``body.request_id`` and wait for its answer. Raises the mapped MagnetarError."""
        fut = self.requests.expect(body.request_id)
        try:
            self.write(type_, **{field: body})
            return await asyncio.wait_for(fut, self.operation_timeout_s)
        except asyncio.TimeoutError as exc:
            raise Timeout(f"{T.Type.Name(type_)} to {self.address} timed out") from exc
        finally:
            if self.requests.forget(body.request_id):
                self.session.abandon(body.request_id)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.session.close()
            self.transport.close()

    def _broker_silent(self) -> None:
        log.warning("no traffic from %s for %.0f s: closing the connection", self.address, self.session.idle_s())
        self.close()


__all__ = ["Connection", "MagnetarError"]
