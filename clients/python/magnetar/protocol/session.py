"""One Pulsar session, sans I/O: bytes in -> events out, commands in -> bytes out (the manner of h11).

Both ends of a connection run the same machine, each in its role. The session
sees every command that passes, in either direction, and that is what moves
it; nothing else may change its state. What it decides:

* the handshake, in ``SESSION_TRANSITIONS`` (a server's CONNECT is answered by the application, which then
  sends CONNECTED, AUTH_CHALLENGE or ERROR through ``send``):
  AWAIT_CONNECT -> (AUTHENTICATING ->) CONNECTED -> CLOSED, and AUTH_CHALLENGE / AUTH_RESPONSE on a
  CONNECTED session to refresh an expiring credential. A server that
  receives anything but the handshake before CONNECTED raises
  CommandBeforeConnect; a second CONNECT raises DuplicateConnect. An ERROR
  answering the handshake refuses the session (CLOSED). A client trusts the
  order of its own code (``open()`` hands a connection out only once it is
  CONNECTED) and takes the broker's other commands in any state, as it
  always has;
* per producer and per consumer, in ``HANDLE_TRANSITIONS``/``CONSUMER_TRANSITIONS``: CREATING on
  PRODUCER/SUBSCRIBE, READY when the answer to that request succeeds, CLOSED
  on an ERROR answer, a CLOSE_* either way, or a successful UNSUBSCRIBE;
* which response answers which request (by request id). On the client an
  answer nobody asked for raises UnknownRequestId; a request given up on
  (``abandon``) is forgotten, so its late answer raises the same;
* keep-alive on an injected clock: ``keep_alive()`` says whether to PING now
  or to give the peer up as dead.

The session never touches a socket or an event loop; the asyncio connections
of the broker and the client are thin wrappers that feed it and write out
what it encodes.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass

from . import pulsar_api_pb2 as pb
from .errors import (CommandBeforeConnect, DuplicateConnect, IllegalTransition, ProtocolViolation, SessionClosed,
                     UnknownRequestId)
from .frames import DEFAULT_MAX_FRAME_BYTES, Frame, FrameDecoder, encode_command, encode_message, field_for_type

T = pb.BaseCommand


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class SessionState(enum.Enum):
    AWAIT_CONNECT = "AWAIT_CONNECT"
    AUTHENTICATING = "AUTHENTICATING"
    CONNECTED = "CONNECTED"
    CLOSED = "CLOSED"


class HandleState(enum.Enum):
    CREATING = "CREATING"
    READY = "READY"
    CLOSED = "CLOSED"  # also what an id that was never opened reads as


class KeepAlive(enum.Enum):
    NOTHING = "nothing"
    PING = "ping"
    DEAD = "dead"  # the peer has been silent too long: close the connection


SENT, RECEIVED = "sent", "received"
S, C = SessionState, Role

# (role, state, direction, command type) -> next state. A handshake command not listed here is illegal.
SESSION_TRANSITIONS = {
    (C.CLIENT, S.AWAIT_CONNECT, SENT, T.CONNECT): S.AWAIT_CONNECT,
    (C.CLIENT, S.AWAIT_CONNECT, RECEIVED, T.CONNECTED): S.CONNECTED,
    (C.CLIENT, S.AWAIT_CONNECT, RECEIVED, T.AUTH_CHALLENGE): S.AUTHENTICATING,
    (C.CLIENT, S.AWAIT_CONNECT, RECEIVED, T.ERROR): S.CLOSED,
    (C.CLIENT, S.AUTHENTICATING, SENT, T.AUTH_RESPONSE): S.AUTHENTICATING,
    (C.CLIENT, S.AUTHENTICATING, RECEIVED, T.AUTH_CHALLENGE): S.AUTHENTICATING,
    (C.CLIENT, S.AUTHENTICATING, RECEIVED, T.CONNECTED): S.CONNECTED,
    (C.CLIENT, S.AUTHENTICATING, RECEIVED, T.ERROR): S.CLOSED,
    (C.SERVER, S.AWAIT_CONNECT, RECEIVED, T.CONNECT): S.AWAIT_CONNECT,  # answered at once by CONNECTED or ERROR
    (C.SERVER, S.AWAIT_CONNECT, SENT, T.CONNECTED): S.CONNECTED,
    (C.SERVER, S.AWAIT_CONNECT, SENT, T.AUTH_CHALLENGE): S.AUTHENTICATING,
    (C.SERVER, S.AWAIT_CONNECT, SENT, T.ERROR): S.CLOSED,
    (C.SERVER, S.AUTHENTICATING, RECEIVED, T.AUTH_RESPONSE): S.AUTHENTICATING,
    (C.SERVER, S.AUTHENTICATING, SENT, T.AUTH_CHALLENGE): S.AUTHENTICATING,
    (C.SERVER, S.AUTHENTICATING, SENT, T.CONNECTED): S.CONNECTED,
    (C.SERVER, S.AUTHENTICATING, SENT, T.ERROR): S.CLOSED,
    # Refresh on a live session (Pulsar's authenticationRefreshCheckSeconds): when a credential expires the
    # server challenges and the client answers with a fresh one; the session stays CONNECTED throughout, so
    # producers and consumers carry on. Whether the answer is good is the application's call.
    (C.SERVER, S.CONNECTED, SENT, T.AUTH_CHALLENGE): S.CONNECTED,
    (C.SERVER, S.CONNECTED, RECEIVED, T.AUTH_RESPONSE): S.CONNECTED,
    (C.CLIENT, S.CONNECTED, RECEIVED, T.AUTH_CHALLENGE): S.CONNECTED,
    (C.CLIENT, S.CONNECTED, SENT, T.AUTH_RESPONSE): S.CONNECTED,
}
_HANDSHAKE = {T.CONNECT, T.CONNECTED, T.AUTH_CHALLENGE, T.AUTH_RESPONSE}
_UNCONNECTED = {S.AWAIT_CONNECT, S.AUTHENTICATING}

OPEN, CREATED, FAILED, CLOSE = "open", "created", "failed", "close"
H = HandleState
# (state, event) -> next state of a producer. What is missing raises IllegalTransition: a second create of a
# producer still being created (the broker answers ProducerBusy).
HANDLE_TRANSITIONS = {
    (H.CLOSED, OPEN): H.CREATING,
    (H.READY, OPEN): H.READY,  # a retried create of a live handle is answered with success again
    (H.CREATING, CREATED): H.READY,
    (H.READY, CREATED): H.READY,
    (H.READY, FAILED): H.READY,  # a retried create failed; the first one still stands
    (H.CREATING, FAILED): H.CLOSED,
    (H.CREATING, CLOSE): H.CLOSED,
    (H.READY, CLOSE): H.CLOSED,
    (H.CLOSED, CLOSE): H.CLOSED,  # closing what is not open is answered with success
    (H.CLOSED, CREATED): H.CLOSED,  # the answer to a create that was closed meanwhile: it stays closed
    (H.CLOSED, FAILED): H.CLOSED,
}
# A consumer's: the same, except that a SUBSCRIBE repeated while the first is still running goes ahead, as the
# broker has always let it (only a subscribed consumer id is refused, ConsumerBusy, by the SUBSCRIBE handler).
CONSUMER_TRANSITIONS = {**HANDLE_TRANSITIONS, (H.CREATING, OPEN): H.CREATING}

# Commands that open a handle, by the field and id naming it; and those that close one.
_OPENS = {T.PRODUCER: ("producer", "producer_id", "producers"), T.SUBSCRIBE: ("subscribe", "consumer_id", "consumers")}
_CLOSES = {T.CLOSE_PRODUCER: ("close_producer", "producer_id", "producers"),
           T.CLOSE_CONSUMER: ("close_consumer", "consumer_id", "consumers")}
# Responses; each carries the request id of the request it answers.
RESPONSES = frozenset({
    T.SUCCESS, T.ERROR, T.PRODUCER_SUCCESS, T.LOOKUP_RESPONSE, T.PARTITIONED_METADATA_RESPONSE,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE,
    T.CONSUMER_STATS_RESPONSE, T.GET_OR_CREATE_SCHEMA_RESPONSE,
})
# A server answers every request itself; it tracks only those whose answer moves a producer or consumer.
_SERVER_TRACKED = {T.PRODUCER, T.SUBSCRIBE, T.UNSUBSCRIBE}
# Bound on a client's outstanding requests (its own code makes them; this catches a leak, not a peer).
MAX_OUTSTANDING_REQUESTS = 100_000


@dataclass(frozen=True)
class Connected:
    """The handshake completed; ``frame`` is the CONNECTED (client) or the CONNECT that was answered (server)."""
    frame: Frame


@dataclass(frozen=True)
class ConnectRefused:
    """The broker answered CONNECT with ERROR; the session is CLOSED."""
    error: int
    message: str


@dataclass(frozen=True)
class Response:
    """The answer to a request this client made; ``body`` is the response's sub-message (e.g. CommandSuccess)."""
    request_id: int
    type: int
    body: object
    frame: Frame


@dataclass
class _Request:
    type: int
    handle: tuple[str, int] | None  # ("producers"|"consumers", id) when the answer moves a handle


class PulsarSession:
    """The state of one Pulsar connection in one role. Not thread-safe; no I/O.

    ``receive_data(bytes)`` then ``next_event()`` until None, where an event is a Frame for the application,
    Connected, ConnectRefused or (client) Response. ``send(command) -> bytes`` to write. Both raise a
    ProtocolError subclass (magnetar.protocol.errors) on a violation; the session's state is unchanged then.
    """

    def __init__(self, role: Role, *, keep_alive_s: float = 30.0, clock=time.monotonic,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.role = role
        self.state = SessionState.AWAIT_CONNECT
        self.keep_alive_s = keep_alive_s
        self.clock = clock
        self.decoder = FrameDecoder(max_frame_bytes)
        self.protocol_version = 0
        self.producers: dict[int, HandleState] = {}
        self.consumers: dict[int, HandleState] = {}
        self._requests: dict[int, _Request] = {}
        self._openers: dict[tuple[str, int], int] = {}  # (kind, id) -> request id of the create that opened it
        self._next_request_id = 0
        self._last_received = clock()
        self._ping_outstanding = False
        self._frames: deque[Frame] = deque()  # decoded, not yet judged

    # ---- inbound -------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Take bytes from the peer; ``next_event()`` then gives what they mean, one frame at a time.
        Raises FrameTooLarge or ProtocolError on bytes that are not Pulsar frames (the connection cannot go on)."""
        self.note_alive()
        frames = self.decoder.feed(data)
        if frames:
            self._frames.extend(frames)

    def next_event(self):
        """The next event, or None when more bytes are needed. One frame at a time, so that the application
        acts on a frame (e.g. answers CONNECT) before the next one is judged. Raises a ProtocolViolation for a
        frame that breaks a rule; that frame is dropped and the next call goes on with the one after it."""
        while self._frames:
            if self.state is S.CLOSED:
                self._frames.clear()  # after close nothing the peer says matters
                return None
            frame = self._frames.popleft()
            try:
                event = self._receive(frame)
            except ProtocolViolation as exc:
                exc.frame = frame
                raise
            if event is not None:
                return event
        return None

    def _receive(self, frame: Frame):
        cmd = frame.command
        t = cmd.type
        if t in _HANDSHAKE or (t == T.ERROR and self.state in _UNCONNECTED and self.role is Role.CLIENT):
            return self._handshake(RECEIVED, cmd, frame)
        if self.role is Role.SERVER:
            if self.state in _UNCONNECTED:
                raise CommandBeforeConnect(f"{T.Type.Name(t)} before CONNECT", t)
            if t in _OPENS or t in _CLOSES or t in _SERVER_TRACKED:
                self._request(cmd)
            return frame
        if t in RESPONSES:
            return self._response(cmd, frame)
        if t in _CLOSES:  # the broker closes a producer or consumer
            field, id_field, kind = _CLOSES[t]
            self._move(kind, getattr(getattr(cmd, field), id_field), CLOSE, t)
        return frame

    def _handshake(self, direction: str, cmd, frame: Frame | None):
        t = cmd.type
        nxt = SESSION_TRANSITIONS.get((self.role, self.state, direction, t))
        if nxt is None:
            if self.state is S.CONNECTED and t in (T.CONNECT, T.CONNECTED):
                raise DuplicateConnect(f"{T.Type.Name(t)} on a session that is already connected", t)
            raise IllegalTransition(f"{direction} {T.Type.Name(t)} in state {self.state.name} ({self.role.value})", t)
        if t == T.CONNECT:
            self.protocol_version = cmd.connect.protocol_version
        elif t == T.CONNECTED and cmd.connected.HasField("protocol_version"):
            self.protocol_version = cmd.connected.protocol_version
        self.state = nxt
        if direction == SENT:
            return None
        if t == T.CONNECTED:
            return Connected(frame)
        if t == T.ERROR:
            return ConnectRefused(cmd.error.error, cmd.error.message)
        return frame

    def _request(self, cmd) -> None:
        """A request passes (sent by a client, received by a server): note it, and open/close its handle."""
        t = cmd.type
        body = getattr(cmd, field_for_type(t))
        if self.role is Role.CLIENT and len(self._requests) >= MAX_OUTSTANDING_REQUESTS:
            raise IllegalTransition(f"more than {MAX_OUTSTANDING_REQUESTS} requests outstanding", t)
        handle = None
        if t in _OPENS:
            _, id_field, kind = _OPENS[t]
            handle = (kind, getattr(body, id_field))
            if self._move(kind, handle[1], OPEN, t) is H.CLOSED and body.HasField("request_id"):
                self._openers[handle] = body.request_id
        elif t in _CLOSES:
            _, id_field, kind = _CLOSES[t]
            self._move(kind, getattr(body, id_field), CLOSE, t)
        elif t == T.UNSUBSCRIBE:
            handle = ("consumers", body.consumer_id)
        if t not in _CARRY_REQUEST_ID or not body.HasField("request_id"):
            return
        if self.role is Role.SERVER and t not in _SERVER_TRACKED:
            return
        self._requests[body.request_id] = _Request(t, handle)

    def _response(self, cmd, frame: Frame | None):
        """A response passes (received by a client, sent by a server): match it to its request."""
        t = cmd.type
        body = getattr(cmd, field_for_type(t))
        request_id = body.request_id
        if t == T.PRODUCER_SUCCESS and not body.producer_ready:
            # WaitForExclusive: queued by the broker; the real answer follows. The broker has bound the producer
            # already and answers a retried create from that binding, so on its side the producer is READY.
            request = self._requests.get(request_id)
            if self.role is Role.SERVER and request is not None and request.handle is not None:
                self._move(*request.handle, CREATED, t)
            return None
        request = self._requests.pop(request_id, None)
        if request is None:
            if self.role is Role.CLIENT:
                raise UnknownRequestId(f"{T.Type.Name(t)} for request id {request_id}, which is not outstanding", t)
            return None  # a server may answer what it did not track (e.g. an ERROR to a malformed command)
        if request.handle is not None:
            kind, handle_id = request.handle
            if t == T.ERROR:
                if request.type in _OPENS:
                    self._move(kind, handle_id, FAILED, t)
            elif request.type == T.UNSUBSCRIBE:
                self._move(kind, handle_id, CLOSE, t)
            else:
                self._move(kind, handle_id, CREATED, t)
        return Response(request_id, t, body, frame) if self.role is Role.CLIENT else None

    def _move(self, kind: str, handle_id: int, event: str, t: int) -> HandleState:
        """Apply a handle event; returns the state it left."""
        handles, table = ((self.producers, HANDLE_TRANSITIONS) if kind == "producers"
                          else (self.consumers, CONSUMER_TRANSITIONS))
        current = handles.get(handle_id, H.CLOSED)
        nxt = table.get((current, event))
        if nxt is None:
            raise IllegalTransition(
                f"{T.Type.Name(t)}: {kind[:-1]} {handle_id} is {current.name}, cannot {event}", t)
        if nxt is H.CLOSED:
            handles.pop(handle_id, None)
            self._openers.pop((kind, handle_id), None)
        else:
            handles[handle_id] = nxt
        return current

    # ---- outbound ------------------------------------------------------------------

    def send(self, cmd, headers_and_payload: bytes | None = None) -> bytes:
        """The bytes of ``cmd`` (with a payload section when given), after moving the session. Raises
        SessionClosed when closed, or a ProtocolViolation when our own side would break a rule."""
        if self.state is S.CLOSED:
            raise SessionClosed(f"cannot send {T.Type.Name(cmd.type)}: the session is closed")
        t = cmd.type
        if t in _HANDSHAKE or (t == T.ERROR and self.state in _UNCONNECTED and self.role is Role.SERVER):
            self._handshake(SENT, cmd, None)
        elif self.role is Role.CLIENT:
            if t in _OPENS or t in _CLOSES or t in _CARRY_REQUEST_ID:
                self._request(cmd)
        elif t in RESPONSES:
            self._response(cmd, None)
        elif t in _CLOSES:  # the broker closes a producer or consumer
            field, id_field, kind = _CLOSES[t]
            self._move(kind, getattr(getattr(cmd, field), id_field), CLOSE, t)
        if headers_and_payload is None:
            return encode_command(cmd)
        return encode_message(cmd, headers_and_payload)

    def next_request_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        return request_id

    def abandon(self, request_id: int) -> None:
        """Nobody will wait for this request's answer any more (a client's timeout; a server's create that lost
        its handle meanwhile): forget it. A create it made is given up, unless a newer one opened the handle."""
        request = self._requests.pop(request_id, None)
        if request is not None and request.handle is not None and request.type in _OPENS \
                and self._openers.get(request.handle) == request_id:
            self._move(request.handle[0], request.handle[1], FAILED, request.type)

    def outstanding(self) -> set[int]:
        return set(self._requests)

    def producer_state(self, producer_id: int) -> HandleState:
        return self.producers.get(producer_id, H.CLOSED)

    def consumer_state(self, consumer_id: int) -> HandleState:
        return self.consumers.get(consumer_id, H.CLOSED)

    def opened_by(self, kind: str, handle_id: int) -> int | None:
        """The request id of the PRODUCER/SUBSCRIBE that opened this handle (kind "producers" or "consumers"),
        None when it is closed. A create finishing late checks it is still the one that counts: the handle
        may have been closed, or closed and opened again by a newer request, while it ran."""
        return self._openers.get((kind, handle_id))

    def close(self) -> list[int]:
        """CLOSED, from any state. Returns the request ids that will now never be answered."""
        self.state = S.CLOSED
        self.producers.clear()
        self.consumers.clear()
        self._openers.clear()
        unanswered = list(self._requests)
        self._requests.clear()
        return unanswered

    # ---- keep-alive ----------------------------------------------------------------

    def keep_alive(self) -> KeepAlive:
        """Called every ``keep_alive_s``. The broker pings each interval and gives the client up when a ping
        went a whole interval unanswered (Pulsar's ServerCnx); the client pings only when the broker has been
        idle for an interval and gives it up after two silent intervals. PING is returned only where it may be
        sent (a server needs a connected session with protocol version >= 1)."""
        if self.state is S.CLOSED:
            return KeepAlive.NOTHING
        idle = self.clock() - self._last_received
        if self.role is Role.CLIENT:
            if idle >= 2 * self.keep_alive_s:
                return KeepAlive.DEAD
            return KeepAlive.PING if idle >= self.keep_alive_s else KeepAlive.NOTHING
        if self._ping_outstanding and idle >= self.keep_alive_s:
            return KeepAlive.DEAD
        if self.state is S.CONNECTED and self.protocol_version >= 1:
            self._ping_outstanding = True
            return KeepAlive.PING
        return KeepAlive.NOTHING

    def note_alive(self) -> None:
        """The peer was heard from (bytes arrived, or the connection was just made)."""
        self._last_received = self.clock()
        self._ping_outstanding = False

    def idle_s(self) -> float:
        return self.clock() - self._last_received


# Requests: the command types, other than responses, whose message has a request id (a fact of the protocol).
_CARRY_REQUEST_ID = frozenset(
    t for t in T.Type.values() if (f := field_for_type(t)) is not None and t not in RESPONSES
    and "request_id" in T.DESCRIPTOR.fields_by_name[f].message_type.fields_by_name)
