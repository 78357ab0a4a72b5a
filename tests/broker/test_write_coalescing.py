"""A connection joins the frames written in one turn of the event loop into one transport write (after the
first, which goes out at once): a burst of replies costs two send() calls, not one each, and nothing is
reordered or lost, including at a close."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.config import BrokerConfig
from broker.server.connection import ServerConnection
from broker.server.limits import ConnectionLimits, PublishBuffer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder
from tests.broker.support import RecordingTransport

T = pb.BaseCommand


def _connection():
    service = SimpleNamespace(config=BrokerConfig("memory://unused"), connections=set(),
                              connection_limits=ConnectionLimits(), publish_buffer=PublishBuffer(0))
    conn, transport = ServerConnection(service), RecordingTransport()
    conn.connection_made(transport)
    return conn, transport


def _request_ids(transport) -> list[int]:
    return [f.command.producer_success.request_id for f in FrameDecoder(1 << 20).feed(transport.written)]


def _reply(conn, request_id: int) -> None:
    conn.write(T.PRODUCER_SUCCESS, producer_success=pb.CommandProducerSuccess(request_id=request_id, producer_name="p"))


async def test_a_burst_of_replies_in_one_turn_is_two_writes_in_order():
    conn, transport = _connection()
    for i in range(1000):
        _reply(conn, i)
    assert transport.writes == 1 and _request_ids(transport) == [0]  # the first is not held back
    await asyncio.sleep(0)  # one turn of the loop
    assert transport.writes == 2
    assert _request_ids(transport) == list(range(1000))


async def test_a_lone_reply_goes_out_at_once_in_every_turn():
    conn, transport = _connection()
    for i in range(3):
        _reply(conn, i)
        assert transport.writes == i + 1 and _request_ids(transport) == list(range(i + 1))
        await asyncio.sleep(0)
        await asyncio.sleep(0)


async def test_frames_held_for_the_turn_go_out_before_a_close():
    conn, transport = _connection()
    for i in range(5):
        _reply(conn, i)
    conn.close()
    assert transport.closed and _request_ids(transport) == list(range(5))
    await asyncio.sleep(0)
    assert _request_ids(transport) == list(range(5))  # nothing written twice
