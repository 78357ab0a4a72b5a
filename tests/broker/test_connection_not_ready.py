"""A PRODUCER or SUBSCRIBE answered ServiceNotReady (the topic moved after the client's lookup) closes the
connection after the error, so every client of it looks its topics up again at once; other commands' errors
leave the connection open. The connection runs on a recording transport; no broker behind it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.config import BrokerConfig
from broker.errors import NotAllowedError, ServiceNotReadyError, TopicFencedError
from broker.server.connection import ServerConnection
from broker.server.limits import ConnectionLimits, PublishBuffer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder
from tests.broker.support import RecordingTransport


def _connection() -> tuple[ServerConnection, RecordingTransport]:
    service = SimpleNamespace(config=BrokerConfig("memory://unused"), connections=set(),
                              connection_limits=ConnectionLimits(), publish_buffer=PublishBuffer(0))
    conn, transport = ServerConnection(service), RecordingTransport()
    conn.connection_made(transport)
    return conn, transport


async def _fail(exc):
    raise exc


@pytest.mark.parametrize("exc, closes", [
    (ServiceNotReadyError("topic t moved while it was loading; look it up again"), True),
    (TopicFencedError("topic t is being unloaded; look it up again"), True),  # a ServiceNotReady too
    (NotAllowedError("t is a partitioned topic"), False),
])
async def test_a_create_answered_not_ready_closes_the_connection_after_the_error(exc, closes):
    conn, transport = _connection()
    await conn.tasks.spawn(_fail(exc), 7, close_when_not_ready=True)
    (frame,) = FrameDecoder(1 << 20).feed(transport.written)  # the error is written before the close
    assert frame.command.type == pb.BaseCommand.ERROR
    assert frame.command.error.request_id == 7 and frame.command.error.message == str(exc)
    assert transport.closed is closes and conn.closed is closes


async def test_other_commands_keep_the_connection_on_not_ready():
    conn, transport = _connection()
    await conn.tasks.spawn(_fail(ServiceNotReadyError("not now")), 8)
    assert FrameDecoder(1 << 20).feed(transport.written)[0].command.error.request_id == 8
    assert not transport.closed
