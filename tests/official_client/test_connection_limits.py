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
