"""From a decoded command to its handler (broker.server.handlers.TABLE), and what a failure answers.

A command that fails synchronously, or that the session refused, is answered
on its own request id; the connection and its other work go on.
"""

from __future__ import annotations

import logging

from broker.errors import BrokerError, NotAllowedError, ProducerBusyError
from broker.server import handlers
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import IllegalTransition, ProtocolViolation

log = logging.getLogger(__name__)
T = pb.BaseCommand


def handle(conn, frame) -> None:
    cmd = frame.command
    handler = handlers.TABLE.get(cmd.type)
    if handler is None:
        log.warning("%s sent unsupported command %s", conn.remote_address, T.Type.Name(cmd.type))
        _answer(conn, cmd, NotAllowedError(f"command {T.Type.Name(cmd.type)} is not supported"))
        return
    try:
        handler(conn, frame)
    except Exception as exc:  # a bad command must not take the connection's other work down
        if not isinstance(exc, BrokerError):
            log.exception("%s: %s failed", conn.remote_address, T.Type.Name(cmd.type))
            exc = BrokerError(f"{T.Type.Name(cmd.type)} failed: {type(exc).__name__}: {exc}")
        _answer(conn, cmd, exc)


def refuse(conn, exc: ProtocolViolation) -> None:
    """A command the session does not allow now. A second create of a producer still being created is
    answered ProducerBusy; anything else (e.g. a second CONNECT) is logged. The connection stays up."""
    cmd = exc.frame.command
    conn.budget.wasted()
    if isinstance(exc, IllegalTransition) and cmd.type == T.PRODUCER:
        conn.out.error(cmd.producer.request_id, ProducerBusyError(
            f"producer {cmd.producer.producer_id} is still being created on this connection"))
    else:
        log.warning("%s: %s failed: %s", conn.remote_address, T.Type.Name(cmd.type), exc)


def _answer(conn, cmd, exc: BrokerError) -> None:
    conn.budget.wasted()
    request_id = request_id_of(cmd)
    if request_id is not None:
        conn.out.error(request_id, exc)
    else:
        log.warning("%s: %s failed: %s", conn.remote_address, T.Type.Name(cmd.type), exc)


def request_id_of(cmd) -> int | None:
    """The request id of a command, when it has one (to address an ERROR reply)."""
    field = handlers.FIELD_OF.get(cmd.type)
    if field is None:
        return None
    sub = getattr(cmd, field)
    return sub.request_id if "request_id" in sub.DESCRIPTOR.fields_by_name and sub.HasField("request_id") else None
