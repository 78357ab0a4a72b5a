"""A raw Pulsar connection for the session fuzz test, and the checks each broker reply must pass.

``Wire`` sends one command and waits for what answers it (by request id, or by producer and sequence id for a
SEND); commands that have no answer are followed by a PING, whose PONG proves the broker read them and kept
the connection. Frames the broker sends by itself (MESSAGE, CLOSE_CONSUMER, ...) are kept in ``unsolicited``.
``reply_problem`` says what is wrong with a reply: every refusal must carry a specific ServerError code (not
UnknownError, which the broker answers only when a handler raised something unexpected) and a message.
"""

from __future__ import annotations

import socket
import time

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command, encode_message

T = pb.BaseCommand
REPLY_TIMEOUT_S = 10.0
SERVER_ERROR_CODES = frozenset(pb.ServerError.values())

# Replies that answer a request, by the field holding them; each carries the request id.
_RESPONSE_FIELDS = {
    T.SUCCESS: "success", T.ERROR: "error", T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse", T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse", T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.ACK_RESPONSE: "ackResponse", T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
}


class Closed(Exception):
    """The broker closed the connection."""


class NoAnswer(AssertionError):
    """The broker kept the connection but did not answer a command in time."""


class Wire:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT_S)
        self.decoder = FrameDecoder()
        self.pending: list = []  # decoded frames not yet looked at
        self.unsolicited: list = []
        self.closed = False

    def connect(self) -> None:
        self.send(command(T.CONNECT, connect=pb.CommandConnect(client_version="session-fuzz", protocol_version=20)))
        reply = self._next(time.monotonic() + REPLY_TIMEOUT_S, command(T.CONNECT))
        assert reply.command.type == T.CONNECTED, reply.command

    def send(self, cmd, headers_and_payload: bytes | None = None) -> None:
        data = encode_command(cmd) if headers_and_payload is None else encode_message(cmd, headers_and_payload)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.closed = True
            raise Closed(str(exc)) from exc

    def request(self, cmd, request_id: int, headers_and_payload: bytes | None = None):
        """Send ``cmd`` and return the reply carrying ``request_id``."""
        self.send(cmd, headers_and_payload)
        return self._until(lambda c: c.type in _RESPONSE_FIELDS
                           and getattr(c, _RESPONSE_FIELDS[c.type]).request_id == request_id, cmd)

    def send_message(self, cmd, headers_and_payload: bytes):
        """A SEND; returns its SEND_RECEIPT or SEND_ERROR."""
        s = cmd.send
        self.send(cmd, headers_and_payload)

        def answers(c):
            if c.type == T.SEND_RECEIPT:
                return (c.send_receipt.producer_id, c.send_receipt.sequence_id) == (s.producer_id, s.sequence_id)
            if c.type == T.SEND_ERROR:
                return (c.send_error.producer_id, c.send_error.sequence_id) == (s.producer_id, s.sequence_id)
            return False
        return self._until(answers, cmd)

    def unanswered(self, cmd) -> None:
        """A command without an answer: send it, then PING, and wait for the PONG."""
        self.send(cmd)
        self.ping()

    def ping(self) -> None:
        self.send(command(T.PING, ping=pb.CommandPing()))
        self._until(lambda c: c.type == T.PONG, command(T.PING, ping=pb.CommandPing()))

    def wait_for(self, type_):
        """The first frame of this type the broker sends by itself (one already received counts)."""
        for i, frame in enumerate(self.unsolicited):
            if frame.command.type == type_:
                return self.unsolicited.pop(i).command
        return self._until(lambda c: c.type == type_, None)

    def _until(self, matches, sent):
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while True:
            frame = self._next(deadline, sent)
            if matches(frame.command):
                return frame.command
            if frame.command.type == T.PING:
                self.send(command(T.PONG, pong=pb.CommandPong()))
            elif frame.command.type != T.PONG:
                self.unsolicited.append(frame)

    def _next(self, deadline: float, sent=None):
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(f"no answer within {REPLY_TIMEOUT_S:g} s to {_describe(sent)}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError as exc:
                self.closed = True
                raise Closed(str(exc)) from exc
            if not data:
                self.closed = True
                raise Closed("the broker closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def close(self) -> None:
        self.sock.close()


def _describe(cmd) -> str:
    if cmd is None:
        return "nothing (waiting for the broker)"
    return f"{T.Type.Name(cmd.type)} {str(cmd).strip()[:300]!r}"


def reply_problem(reply) -> str | None:
    """What is wrong with a reply, or None. A refusal needs a specific code and a message."""
    t = reply.type
    if t == T.ERROR:
        return _refusal_problem(reply.error.error, reply.error.message)
    if t == T.SEND_ERROR:
        return _refusal_problem(reply.send_error.error, reply.send_error.message)
    if t == T.LOOKUP_RESPONSE and reply.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed:
        return _refusal_problem(reply.lookupTopicResponse.error, reply.lookupTopicResponse.message)
    if t == T.PARTITIONED_METADATA_RESPONSE and \
            reply.partitionMetadataResponse.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
        return _refusal_problem(reply.partitionMetadataResponse.error, reply.partitionMetadataResponse.message)
    if t == T.ACK_RESPONSE and reply.ackResponse.HasField("error"):
        return _refusal_problem(reply.ackResponse.error, reply.ackResponse.message)
    return None


def _refusal_problem(code: int, message: str) -> str | None:
    if code not in SERVER_ERROR_CODES:
        return f"error code {code} is not a ServerError"
    if code == pb.UnknownError:
        return f"UnknownError (a handler raised something unexpected): {message!r}"
    if not message:
        return f"{pb.ServerError.Name(code)} without a message"
    return None
