"""Where each event a client session yields goes: answers to their waiting requests, the handshake's outcome to
the opener, MESSAGE to its consumer, receipts to their producer, a broker-side close to the handler (which
reconnects), PING to a PONG."""

from __future__ import annotations

import asyncio
import logging

from magnetar.auth import auth_response_command
from magnetar.errors import for_code
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.session import Connected, ConnectRefused, Response

log = logging.getLogger(__name__)
T = pb.BaseCommand


class PendingRequests:
    """The futures of requests waiting for their answer, by request id."""

    def __init__(self):
        self._futures: dict[int, asyncio.Future] = {}

    def expect(self, request_id: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._futures[request_id] = fut
        return fut

    def forget(self, request_id: int) -> bool:
        """Stop waiting; True when the request was still unanswered."""
        return self._futures.pop(request_id, None) is not None

    def answer(self, response: Response) -> None:
        fut = self._futures.pop(response.request_id, None)
        if fut is None or fut.done():
            return
        if response.type == T.ERROR:
            fut.set_exception(for_code(response.body.error, response.body.message))
        else:
            fut.set_result(response.body)

    def fail_all(self, error: Exception) -> None:
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(error)
        self._futures.clear()


def route(conn, event) -> None:
    if type(event) is Response:
        conn.requests.answer(event)
    elif type(event) is Connected:
        connected = event.frame.command.connected
        if connected.HasField("max_message_size"):
            conn.max_message_size = connected.max_message_size
        settle(conn.handshake, None)
    elif type(event) is ConnectRefused:
        settle(conn.handshake, for_code(event.error, event.message))
    else:
        handler = _FRAMES.get(event.command.type)
        if handler is not None:
            handler(conn, event)
        else:
            log.debug("ignoring %s from %s", T.Type.Name(event.command.type), conn.address)


def settle(fut: asyncio.Future | None, error: Exception | None) -> None:
    """Complete the handshake's future (None when nobody waits for it)."""
    if fut is None or fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


def _message(conn, frame) -> None:
    handler = conn.consumers.get(frame.command.message.consumer_id)
    if handler is not None:
        handler.on_message(frame.command.message, frame)


def _receipt(conn, frame) -> None:
    handler = conn.producers.get(frame.command.send_receipt.producer_id)
    if handler is not None:
        handler.on_receipt(frame.command.send_receipt)


def _send_error(conn, frame) -> None:
    handler = conn.producers.get(frame.command.send_error.producer_id)
    if handler is not None:
        handler.on_send_error(frame.command.send_error)


def _close_producer(conn, frame) -> None:
    handler = conn.producers.pop(frame.command.close_producer.producer_id, None)
    if handler is not None:
        handler.on_connection_lost(conn)


def _close_consumer(conn, frame) -> None:
    handler = conn.consumers.pop(frame.command.close_consumer.consumer_id, None)
    if handler is not None:
        handler.on_connection_lost(conn)


def _auth_challenge(conn, frame) -> None:
    """The broker wants fresh credentials (an expired token; or a multi-round method): answer with new data."""
    from magnetar.asyncio.connection import CLIENT_VERSION, PROTOCOL_VERSION

    try:
        response = auth_response_command(CLIENT_VERSION, PROTOCOL_VERSION, conn.authentication,
                                         frame.command.authChallenge)
    except Exception as exc:  # a token supplier is the application's code: its failure ends this connection only
        log.warning("closing connection to %s: no credentials for the broker's challenge: %s", conn.address, exc)
        conn.close()
        return
    conn.write(T.AUTH_RESPONSE, authResponse=response)


_FRAMES = {
    T.AUTH_CHALLENGE: _auth_challenge,
    T.MESSAGE: _message,
    T.SEND_RECEIPT: _receipt,
    T.SEND_ERROR: _send_error,
    T.CLOSE_PRODUCER: _close_producer,
    T.CLOSE_CONSUMER: _close_consumer,
    T.PING: lambda conn, frame: conn.write(T.PONG, pong=pb.CommandPong()),
    T.PONG: lambda conn, frame: None,
    T.ACTIVE_CONSUMER_CHANGE: lambda conn, frame: None,
}
