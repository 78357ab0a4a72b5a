"""The per-connection command budget on a real broker: a connection that floods control commands or refused
commands waits for its budget (it is neither refused nor closed), and a well-behaved client beside it does not."""

from __future__ import annotations

import time

import pulsar

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from tests.official_client.support import RawConnection, admin_call, publish_all

T = pb.BaseCommand
RATE = 100  # per second, for both kinds: each burst is 1 s of its rate


def _start(start_standalone):
    return start_standalone(env={"MAGNETAR_BROKER_MAX_CONTROL_COMMANDS_PER_CONNECTION_PER_S": str(RATE),
                                 "MAGNETAR_BROKER_MAX_CONTROL_COMMANDS_BURST_PER_CONNECTION": str(RATE),
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


def _published_ids(client, topic: str, count: int) -> list[tuple[int, int]]:
    """Publish ``count`` unbatched messages; their (ledger, entry) positions."""
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(count):
        ids.append(producer.send(f"m{i}".encode()))
    producer.close()
    return [(m.ledger_id(), m.entry_id()) for m in ids]


def test_acks_of_entries_never_dispatched_wait_for_their_budget(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_MAX_UNDISPATCHED_ACKS_PER_CONNECTION_PER_S": str(10 * RATE)})
    topic = "persistent://public/default/budget-undispatched-acks"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    client.subscribe(topic, "bomb").close()  # the subscription exists before the messages
    ids = _published_ids(client, topic, 10 * RATE)
    client.close()
    attacker = RawConnection(broker.port)
    attacker.connect()
    attacker.send(encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="bomb", subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=1))))
    assert attacker.next().type == T.SUCCESS
    # No FLOW: nothing is dispatched to it, yet every id names a real entry, four times over. The first frame is
    # the burst, a frame is charged as it is handled, so the last waits for the two before it: two seconds.
    acks = [pb.MessageIdData(ledgerId=ledger, entryId=entry) for ledger, entry in ids]
    start = time.monotonic()
    attacker.send(b"".join(encode_command(command(T.ACK, ack=pb.CommandAck(
        consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=acks, request_id=10 + i))) for i in range(4)))
    _good_client_publishes_promptly(broker, topic + "-good")
    elapsed = _answers(attacker, 4, T.ACK_RESPONSE, start)
    assert elapsed >= 1.5, f"4 x {len(acks)} acks of entries never dispatched were applied in {elapsed:.2f} s: no budget"
    attacker.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert attacker.next().type == T.PONG  # paced, not closed
    attacker.close()
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/public/default/budget-undispatched-acks/stats")
    assert status == 200 and stats["subscriptions"]["bomb"]["msgBacklog"] == 0  # allowed acks, all applied


def test_a_consumer_acking_what_it_was_sent_never_spends_that_budget(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_MAX_UNDISPATCHED_ACKS_PER_CONNECTION_PER_S": "100"})
    topic = "persistent://public/default/budget-dispatched-acks"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    count = 3000  # 30 s of that budget, were these acks charged to it
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=count, block_if_queue_full=True)
    publish_all(producer, count)
    start = time.monotonic()
    for _ in range(count):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()  # flushes the grouped acks, and waits for the broker to take them
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"{count} messages received and acked in {elapsed:.1f} s"
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/public/default/budget-dispatched-acks/stats")
    assert status == 200 and stats["subscriptions"]["s"]["msgBacklog"] == 0
    client.close()
