"""Connection bounds on a real broker: brokerMaxConnectionsPerIp, brokerMaxConnections and the CONNECT deadline.

A refused connection is closed before anything is read from it; the connections already admitted keep working,
and a freed slot admits the next one.
"""

from __future__ import annotations

import time

import pytest

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command
from storage.testing.waiting import wait_until
from tests.official_client.support import RawConnection

T = pb.BaseCommand


def _pong(conn: RawConnection) -> bool:
    conn.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    return conn.next().type == T.PONG


@pytest.mark.parametrize("variable", ["MAGNETAR_BROKER_BROKER_MAX_CONNECTIONS_PER_IP", "MAGNETAR_BROKER_BROKER_MAX_CONNECTIONS"])
def test_connections_beyond_the_limit_are_closed_and_a_freed_slot_is_reused(start_standalone, variable):
    # The broker's own clients (the standalone's metadata and bookies) do not dial its Pulsar port, so the
    # limit counts only these.
    broker = start_standalone(env={variable: "3"})
    admitted = [RawConnection(broker.port) for _ in range(3)]
    for conn in admitted:
        conn.connect()
    refused = RawConnection(broker.port)
    assert refused.closed_by_peer()
    assert all(_pong(conn) for conn in admitted)
    admitted.pop().close()

    def a_new_one_is_admitted():
        conn = RawConnection(broker.port)
        try:
            conn.connect()
        except (ConnectionError, AssertionError):
            conn.close()
            return None
        return conn

    admitted.append(wait_until(a_new_one_is_admitted, 10, "a connection admitted once a slot was freed"))
    assert all(_pong(conn) for conn in admitted)
    for conn in admitted:
        conn.close()


def test_a_connection_that_never_sends_connect_is_closed_after_the_timeout(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_CONNECTION_TIMEOUT_S": "1"})
    silent, good = RawConnection(broker.port), RawConnection(broker.port)
    good.connect()
    start = time.monotonic()
    assert silent.closed_by_peer()  # the harness's socket timeout is 10 s; the broker closes it after ~1 s
    assert time.monotonic() - start < 8
    assert _pong(good)  # a connected client stays past the deadline
    silent.close()
    good.close()




def _answer_pings_for(conn: RawConnection, seconds: float) -> None:
    """Answer the broker's PINGs on ``conn`` for ``seconds``."""
    conn.sock.settimeout(0.2)
    until = time.monotonic() + seconds
    try:
        while time.monotonic() < until:
            try:
                reply = conn.next()
            except TimeoutError:
                continue
            assert reply.type == T.PING, reply
            conn.send(encode_command(command(T.PONG, pong=pb.CommandPong())))
    finally:
        conn.sock.settimeout(10)


def test_a_connection_that_stops_answering_pings_is_closed(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_KEEP_ALIVE_INTERVAL_S": "1"})
    silent, answering = RawConnection(broker.port), RawConnection(broker.port)
    silent.connect()
    answering.connect()
    # The broker pings after a quiet interval and gives the peer up after another without a PONG; the
    # connection that answers stays up all along.
    _answer_pings_for(answering, 4)
    silent.sock.settimeout(0.1)
    assert silent.closed_by_peer()
    answering.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    while (reply := answering.next()).type == T.PING:
        answering.send(encode_command(command(T.PONG, pong=pb.CommandPong())))
    assert reply.type == T.PONG
    answering.close()
