"""One client connection speaking the Pulsar binary protocol (Pulsar's ServerCnx).

The asyncio side is thin (STYLE.md 1): the session (magnetar.protocol.session,
shared with the client) decides the handshake, the producer and consumer
lifecycles and the keep-alive; bytes go into it, each command it lets through
goes to its handler from a table keyed by command type, and replies are
encoded through it.

Ordering: commands are handled in arrival order. A SEND starts its storage
write before the next frame is looked at, and the managed ledger completes
writes in order, so receipts go out in the order the sends came in.

Bad input never harms anyone else: a malformed or oversized frame closes this
connection only; a command that fails gets ERROR / SEND_ERROR with a specific
ServerError code and message and the connection stays up.
"""

from __future__ import annotations

import asyncio
import logging

from broker.errors import (
    BrokerError, NotAllowedError, PersistenceError, ProducerBusyError, ServiceNotReadyError,
)
from broker.server import handlers
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import CommandBeforeConnect, IllegalTransition, ProtocolError, ProtocolViolation
from magnetar.protocol.frames import command
from magnetar.protocol.session import KeepAlive, PulsarSession, Role, SessionState
from storage.errors import StorageError

log = logging.getLogger(__name__)

T = pb.BaseCommand
# Pulsar's maxPendingPublishRequestsPerConnection: stop reading the socket beyond this many unanswered sends.
MAX_PENDING_SENDS = 1000


class ServerConnection(asyncio.Protocol):
    def __init__(self, service):
        self.service = service
        self.config = service.config
        self.session = PulsarSession(Role.SERVER, keep_alive_s=self.config.keep_alive_interval_s,
                                     max_frame_bytes=self.config.max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.client_version = ""
        self.auth_role: str | None = None  # set on CONNECT when authentication is on (broker/server/auth_handshake.py)
        self.auth_state = None  # auth_handshake.AuthState: the credential, its expiry, a pending refresh
        self.producers: dict[int, object] = {}  # producer_id -> ProducerBinding, once the session has it READY
        self.consumers: dict[int, object] = {}  # consumer_id -> ConsumerBinding
        self.writable = True
        self.closed = False
        self.pending_sends = 0
        self._reading_paused = False
        self._tasks: set[asyncio.Task] = set()
        self._keepalive: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self.session.state is SessionState.CONNECTED

    @property
    def protocol_version(self) -> int:
        return self.session.protocol_version

    # ---- asyncio.Protocol --------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.service.connections.add(self)
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        try:
            self.session.receive_data(data)
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.remote_address, exc)
            self.close()
            return
        while not self.closed:
            try:
                frame = self.session.next_event()
            except CommandBeforeConnect as exc:
                log.warning("closing %s: %s", self.remote_address, exc)
                self.close()
                return
            except ProtocolViolation as exc:
                self._refuse(exc)
                continue
            if frame is None:
                return
            self._handle(frame)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.session.close()
        self.service.connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
        for task in list(self._tasks):
            task.cancel()
        handlers.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for binding in list(self.consumers.values()):
            binding.subscription.dispatcher.wake()

    # ---- inbound -----------------------------------------------------------

    def _refuse(self, exc: ProtocolViolation) -> None:
        """A command the session does not allow now. A second create of a producer still being created is
        answered ProducerBusy; anything else (e.g. a second CONNECT) is logged. The connection stays up."""
        cmd = exc.frame.command
        if isinstance(exc, IllegalTransition) and cmd.type == T.PRODUCER:
            self.send_error(cmd.producer.request_id, ProducerBusyError(
                f"producer {cmd.producer.producer_id} is still being created on this connection"))
        else:
            log.warning("%s: %s failed: %s", self.remote_address, T.Type.Name(cmd.type), exc)

    def _handle(self, frame) -> None:
        cmd = frame.command
        handler = handlers.TABLE.get(cmd.type)
        if handler is None:
            log.warning("%s sent unsupported command %s", self.remote_address, T.Type.Name(cmd.type))
            request_id = _request_id(cmd)
            if request_id is not None:
                self.send_error(request_id, NotAllowedError(f"command {T.Type.Name(cmd.type)} is not supported"))
            return
        try:
            handler(self, frame)
        except Exception as exc:  # a bad command must not take the connection's other work down
            if not isinstance(exc, BrokerError):
                log.exception("%s: %s failed", self.remote_address, T.Type.Name(cmd.type))
                exc = BrokerError(f"{T.Type.Name(cmd.type)} failed: {type(exc).__name__}: {exc}")
            request_id = _request_id(cmd)
            if request_id is not None:
                self.send_error(request_id, exc)
            else:
                log.warning("%s: %s failed: %s", self.remote_address, T.Type.Name(cmd.type), exc)

    def spawn(self, coro, request_id: int | None = None, *, close_when_not_ready: bool = False) -> asyncio.Task:
        """Run a command's async part; a BrokerError it raises becomes ERROR for ``request_id``.

        ``close_when_not_ready`` (PRODUCER, SUBSCRIBE): after a ServiceNotReady answer (the topic moved, e.g. its
        bundle was split or unloaded after the client's lookup) close the connection too. That is how Pulsar
        clients expect to hear it: they close the connection themselves on most ServiceNotReady errors, and
        pulsar-client 3.13 left on an open connection retries a first PRODUCER or SUBSCRIBE only when its
        operation timeout has passed (measured: a consumer that met one error on creation failed after the
        timeout). Closed, every producer and consumer of the connection looks its topic up again at once."""
        task = asyncio.get_running_loop().create_task(self._guarded(coro, request_id, close_when_not_ready))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _guarded(self, coro, request_id, close_when_not_ready: bool = False):
        try:
            return await coro
        except asyncio.CancelledError:
            raise
        except BrokerError as exc:
            if request_id is not None:
                self.send_error(request_id, exc)
            if close_when_not_ready and isinstance(exc, ServiceNotReadyError):
                log.info("%s: closing the connection after %s so its clients look their topics up again",
                         self.remote_address, exc)
                self.close()
        except StorageError as exc:
            if request_id is not None:
                self.send_error(request_id, PersistenceError(str(exc)))
        except Exception as exc:  # a bug must not take the broker down; the client hears of it
            log.exception("%s: unexpected error", self.remote_address)
            if request_id is not None:
                self.send_error(request_id, BrokerError(f"{type(exc).__name__}: {exc}"))

    def send_started(self) -> None:
        self.pending_sends += 1
        if self.pending_sends >= MAX_PENDING_SENDS and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def send_finished(self) -> None:
        self.pending_sends -= 1
        if self._reading_paused and self.pending_sends <= MAX_PENDING_SENDS // 2 and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    # ---- outbound ----------------------------------------------------------

    def write(self, type_, **fields) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(self.session.send(command(type_, **fields)))

    def send_error(self, request_id: int, exc: BrokerError) -> None:
        self.write(T.ERROR, error=pb.CommandError(request_id=request_id, error=exc.code, message=str(exc)))

    def send_success(self, request_id: int) -> None:
        self.write(T.SUCCESS, success=pb.CommandSuccess(request_id=request_id))

    def send_message(self, consumer_id: int, position, data: bytes, redelivery_count: int,
                     ack_set: list[int] | None, partition: int) -> None:
        if self.closed or self.transport is None:
            return
        msg = pb.CommandMessage(
            consumer_id=consumer_id,
            message_id=pb.MessageIdData(ledgerId=position[0], entryId=position[1], partition=partition),
            redelivery_count=redelivery_count,
        )
        if ack_set:
            msg.ack_set.extend(ack_set)
        self.transport.write(self.session.send(command(T.MESSAGE, message=msg), data))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.write(T.ACTIVE_CONSUMER_CHANGE,
                   active_consumer_change=pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active))

    def send_close_consumer(self, consumer_id: int) -> None:
        self.write(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=0))

    def forget_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)

    def close_producer(self, producer_id: int) -> None:
        """The broker closes a producer (fenced, topic unloaded): the client reconnects through lookup."""
        self.producers.pop(producer_id, None)
        self.write(T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=0))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.session.close()
            self.transport.close()

    # ---- keep-alive ----------------------------------------------------------

    def _schedule_keepalive(self) -> None:
        interval = self.session.keep_alive_s
        if interval > 0:
            self._keepalive = asyncio.get_running_loop().call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self.closed:
            return
        action = self.session.keep_alive()
        if action is KeepAlive.DEAD:
            log.warning("closing %s: no response to keep-alive ping", self.remote_address)
            self.close()
            return
        if action is KeepAlive.PING:
            self.write(T.PING, ping=pb.CommandPing())
        self._schedule_keepalive()


def _request_id(cmd) -> int | None:
    """The request id of a command, when it has one (to address an ERROR reply)."""
    field = handlers.FIELD_OF.get(cmd.type)
    if field is None:
        return None
    sub = getattr(cmd, field)
    return sub.request_id if "request_id" in sub.DESCRIPTOR.fields_by_name and sub.HasField("request_id") else None

