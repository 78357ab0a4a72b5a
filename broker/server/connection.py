"""One client connection speaking the Pulsar binary protocol (Pulsar's ServerCnx): the I/O around a session.

The session (magnetar.protocol.session, shared with the client) decides the
handshake, the producer and consumer lifecycles and the keep-alive; bytes go
into it, each command it lets through goes to its handler
(broker.server.dispatch), and what goes out is encoded through it
(``conn.write`` for replies, ``conn.out`` for the rest). A command's
asynchronous part runs in ``conn.tasks`` (broker.server.tasks).

Ordering: commands are handled in arrival order. A SEND starts its storage
write before the next frame is looked at, and the managed ledger completes
writes in order, so receipts go out in the order the sends came in.

Writes: the first frame written in a turn of the event loop goes out at once; the others written in the
same turn (the replies to a burst of pipelined commands, a dispatcher's MESSAGEs) are joined and written once
at the start of the next turn, as Pulsar's FlushConsolidationHandler does. On loopback each transport write is
a send() syscall of tens of microseconds: 10,000 pipelined PRODUCER commands spent a third of the loop in them.

Bad input never harms anyone else: a malformed or oversized frame closes this
connection only; a command that fails gets ERROR / SEND_ERROR with a specific
ServerError code and message and the connection stays up.
"""

from __future__ import annotations

import asyncio
import logging

from broker.server import dispatch, handlers
from broker.server.command_budget import BUDGET_SPENT, CommandBudget
from broker.server.outbound import Outbound
from broker.server.tasks import CommandTasks
from magnetar.asyncio.keepalive import KeepAliveTimer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import CommandBeforeConnect, ProtocolError, ProtocolViolation
from magnetar.protocol.frames import command
from magnetar.protocol.session import PulsarSession, Role, SessionState

log = logging.getLogger(__name__)
T = pb.BaseCommand
FRAMES_PER_TURN = 8
FRAMES_WAITING = "frames read and not yet handled"


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
        self.out = Outbound(self)
        self.tasks = CommandTasks(self)
        self.budget = CommandBudget(self.config.max_control_commands_per_connection_per_s,
                                    self.config.max_wasted_commands_per_connection_per_s,
                                    self.config.max_undispatched_acks_per_connection_per_s,
                                    self.config.max_control_commands_burst_per_connection)
        self._budget_timer: asyncio.TimerHandle | None = None
        self._keep_alive = KeepAliveTimer(self.session, ping=lambda: self.write(T.PING, ping=pb.CommandPing()),
                                          dead=self._peer_silent)
        self._admitted = False
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._corked: list[bytes] | None = None  # frames written after the first of this turn (see write_frame)

    @property
    def connected(self) -> bool:
        return self.session.state is SessionState.CONNECTED

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=self.config.pulsar_channel_write_buffer_high_water_mark,
                                          low=self.config.pulsar_channel_write_buffer_low_water_mark)
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        refusal = self.service.connection_limits.admit(self._ip)
        if refusal is not None:
            return self._drop(f"connection refused: {refusal}")
        self._admitted = True
        self.service.connections.add(self)
        self._keep_alive.start()
        self._handshake_timer = asyncio.get_running_loop().call_later(self.config.connection_timeout_s,
                                                                      self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.receive_data(data)
        except ProtocolError as exc:
            return self._drop(exc)
        self.handle_frames()

    def handle_frames(self) -> None:
        """Handle what has arrived, at most FRAMES_PER_TURN frames per turn of the event loop: one read can hold
        thousands of small frames, and a client sending them back to back must not hold the loop (every other
        client's turn) for all of them. Reading pauses until every frame read is handled, and while the
        connection has spent its command budget (broker.server.command_budget)."""
        for _ in range(FRAMES_PER_TURN):
            if self.closed:
                return
            wait_s = self.budget.wait_s()
            if wait_s > 0 and self._budget_timer is None:
                self.tasks.pause_reading(BUDGET_SPENT, hold_frames=True)
                self._budget_timer = asyncio.get_running_loop().call_later(wait_s, self._budget_refilled)
            if self.tasks.holding_frames:
                # Nothing more is read while frames already read wait: the session would queue them unbounded.
                self.tasks.pause_reading(FRAMES_WAITING)
                return
            try:
                frame = self.session.next_event()
            except CommandBeforeConnect as exc:
                return self._drop(exc)
            except ProtocolViolation as exc:
                dispatch.refuse(self, exc)
                continue
            if frame is None:
                self.tasks.resume_reading(FRAMES_WAITING)
                return
            self.budget.command(frame.command.type)
            dispatch.handle(self, frame)
        self.tasks.pause_reading(FRAMES_WAITING)
        asyncio.get_running_loop().call_soon(self.handle_frames)

    def _budget_refilled(self) -> None:
        self._budget_timer = None
        self.tasks.resume_reading(BUDGET_SPENT)  # handles the frames held meanwhile

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._budget_timer is not None:
            self._budget_timer.cancel()
        self.session.close()
        self.service.connections.discard(self)
        self._keep_alive.cancel()
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self.tasks.cancel_all()
        self.service.publish_buffer.forget(self)
        if self._admitted:
            self.service.connection_limits.release(self._ip)
        handlers.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False
        self.tasks.unwritable()

    def resume_writing(self) -> None:
        self.writable = True
        self.tasks.writable()
        for binding in list(self.consumers.values()):
            binding.subscription.dispatcher.wake()

    def write(self, type_, **fields) -> None:
        self.write_frame(command(type_, **fields))

    def write_frame(self, cmd, payload: bytes | None = None) -> None:
        if self.closed or self.transport is None:
            return
        data = self.session.send(cmd, payload)
        if self._corked is not None:
            self._corked.append(data)
            return
        self.transport.write(data)
        try:
            asyncio.get_running_loop().call_soon(self._uncork)
        except RuntimeError:  # no loop running (a unit test driving the connection by hand): nothing to join
            return
        self._corked = []

    def _uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked and not self.closed and self.transport is not None:
            self.transport.write(b"".join(corked) if len(corked) > 1 else corked[0])

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._uncork()  # what was written before the close still goes out, as with an unjoined write
            self.closed = True
            self.session.close()
            self.transport.close()

    @property
    def _ip(self) -> str:
        return self.remote_address.rpartition(":")[0]

    def _handshake_expired(self) -> None:
        if self.session.state is not SessionState.CONNECTED:
            self._drop(f"no completed CONNECT within {self.config.connection_timeout_s:g} s")

    def _drop(self, exc: Exception | str) -> None:
        log.warning("closing %s: %s", self.remote_address, exc)
        self.close()

    def _peer_silent(self) -> None:
        log.warning("closing %s: no response to keep-alive ping", self.remote_address)
        self.close()
