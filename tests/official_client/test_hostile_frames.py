"""One-frame attacks a connected client can try: each is answered or ignored, and the broker stays responsive.

"Responsive" is measured the way a new client meets it: a fresh connection's CONNECT and PING are answered
within a second right after the attack (the broker is one process; an attack that hangs its loop fails this).
"""

from __future__ import annotations

import time

import pulsar
import pytest

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from tests.official_client.support import receive_n

T = pb.BaseCommand
HUGE = 2**31 - 1


def assert_responsive(raw, within_s: float = 1.0) -> None:
    start = time.monotonic()
    probe = raw()
    probe.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert probe.next().type == T.PONG
    elapsed = time.monotonic() - start
    assert elapsed < within_s, f"a new client waited {elapsed:.2f} s for CONNECTED and PONG"


def _subscribe(conn, topic: str, consumer_id: int = 1) -> None:
    conn.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="bomb", subType=pb.CommandSubscribe.Exclusive, consumer_id=consumer_id,
        request_id=1, initialPosition=pb.CommandSubscribe.Earliest))))
    assert conn.next().type == T.SUCCESS


def test_an_ack_claiming_a_huge_batch_is_bounded(raw, client, topic):
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    attacker = raw()
    _subscribe(attacker, topic)
    ledger, entry = 0, 0
    attacker.send(encode_command(command(T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=10))))
    message = attacker.next()
    assert message.type == T.MESSAGE
    ledger, entry = message.message.message_id.ledgerId, message.message.message_id.entryId
    # The bitset says "index 0 still unacknowledged" against a claimed 2^31-message batch, for the real entry and
    # for 1,000 invented ones; the old code built set(range(batch_size)) for each.
    ids = [pb.MessageIdData(ledgerId=ledger, entryId=entry + k, ack_set=[1], batch_size=HUGE) for k in range(1000)]
    for ack_type in (pb.CommandAck.Individual, pb.CommandAck.Cumulative):
        attacker.send(encode_command(command(T.ACK, ack=pb.CommandAck(
            consumer_id=1, ack_type=ack_type, message_id=ids if ack_type == pb.CommandAck.Individual else ids[:1]))))
    assert_responsive(raw)
    consumer = client.subscribe(topic, "good", initial_position=pulsar.InitialPosition.Earliest)
    assert sorted(m.data() for m in receive_n(consumer, 3)) == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("num_messages, in_batch", [(HUGE, HUGE), (1, HUGE), (HUGE, 1), (0, 0), (5, 5)])
def test_a_poison_batch_count_is_refused(raw, client, topic, num_messages, in_batch):
    attacker = raw()
    attacker.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))))
    assert attacker.next().type == T.PRODUCER_SUCCESS
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=in_batch)
    attacker.send(encode_payload_command(command(T.SEND, send=pb.CommandSend(
        producer_id=1, sequence_id=0, num_messages=num_messages)), metadata, b"four"))  # 4 bytes: at most 4 messages
    reply = attacker.next()
    assert reply.type == T.SEND_ERROR and reply.send_error.error == pb.NotAllowedError
    assert "out of range" in reply.send_error.message
    assert_responsive(raw)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "good", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"fine")
    assert receive_n(consumer, 1)[0].data() == b"fine"  # nothing of the poison entry was stored


def test_oversized_subscribe_fields_are_refused_and_the_connection_stays(raw, topic):
    conn = raw()
    conn.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=3,
        metadata=[pb.KeyValue(key=f"k{i}", value="v") for i in range(10_000)]))))
    reply = conn.next()
    assert reply.type == T.ERROR and reply.error.request_id == 3 and reply.error.error == pb.NotAllowedError
    assert "metadata" in reply.error.message
    conn.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=4))))
    assert conn.next().type == T.SUCCESS  # the same consumer id, within bounds: nothing was left half-created
