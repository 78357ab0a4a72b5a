"""The per-connection command budget on a real broker: a connection that floods control commands or refused
commands waits for its budget (it is neither refused nor closed), and a well-behaved client beside it does not."""

from __future__ import annotations

import time

import pulsar

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from tests.official_client.support import RawConnection

T = pb.BaseCommand
RATE = 100  # per second, for both kinds: each burst is 1 s of its rate


def _start(start_standalone):
    return start_standalone(env={"MAGNETAR_BROKER_MAX_CONTROL_COMMANDS_PER_CONNECTION_PER_S": str(RATE),
                                 "MAGNETAR_BROKER_MAX_WASTED_COMMANDS_PER_CONNECTION_PER_S": str(RATE)})


def _answers(conn: RawConnection, count: int, type_, start: float) -> float:
    """Read ``count`` replies of ``type_``; the seconds from ``start`` to the last."""
    seen = 0
    while seen < count:
        seen += conn.next().type == type_
    return time.monotonic() - start


def _good_client_publishes_promptly(broker, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic)
        start = time.monotonic()
        for i in range(20):
            producer.send(f"good-{i}".encode())
        assert time.monotonic() - start < 5
    finally:
        client.close()


def test_producer_creates_beyond_the_burst_wait_for_the_rate(start_standalone):
    broker = _start(start_standalone)
    topic = "persistent://public/default/budget-creates"
    attacker = RawConnection(broker.port)
    attacker.connect()
    count = 3 * RATE  # one burst free, then two seconds' worth at the rate
    start = time.monotonic()
    attacker.send(b"".join(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=i, request_id=i))) for i in range(1, count + 1)))
    _good_client_publishes_promptly(broker, topic + "-good")
    elapsed = _answers(attacker, count, T.PRODUCER_SUCCESS, start)
    assert elapsed >= 1.5, f"{count} producer creates were all answered in {elapsed:.2f} s: no budget"
    attacker.close()


def test_refused_sends_beyond_the_burst_wait_for_the_rate(start_standalone):
    broker = _start(start_standalone)
    topic = "persistent://public/default/budget-poison"
    attacker = RawConnection(broker.port)
    attacker.connect()
    attacker.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))))
    assert attacker.next().type == T.PRODUCER_SUCCESS
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2**31 - 1)
    poison = encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0)), metadata, b"x" * 100)
    count = RATE + 2 * RATE  # the burst, then two seconds at the rate
    start = time.monotonic()
    attacker.send(poison * count)
    _good_client_publishes_promptly(broker, topic + "-good")
    elapsed = _answers(attacker, count, T.SEND_ERROR, start)
    assert elapsed >= 1.5, f"{count} refused sends were all answered in {elapsed:.2f} s: no budget"
    attacker.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert attacker.next().type == T.PONG  # throttled, not closed
    attacker.close()
