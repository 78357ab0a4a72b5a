"""A dedup producer's resend after its connection dropped mid-store is answered, not refused for ever (nemesis seed 7).

Found in the 100-round replay of ``python -m loadtest.nemesis --seed 7 --rounds 100`` (and seed 12, and once in the
short run, seed 2). The official client closes its connection on a send error; the broker then cancelled the
connection's tasks, among them a publish waiting for its entry to be stored. Deduplication never learned the
outcome: the sequence id stayed "pushed", and every resend was answered "still being stored; retry" for as long as
the broker ran. The store now runs to its end shielded from the cancelled task (PersistentTopic.publish).

Real processes: ZooKeeper, two bookies in fault-injection mode (their journal fsync is slowed, so the store is
pending for seconds) and one broker with deduplication on; the producer is a hand-driven Pulsar connection, so the
test decides exactly when the connection drops. The message must be stored once and the resend acknowledged.
Without the shield the test fails either way the cancelled store is handled: left "pushed", every resend is
refused until the deadline (the livelock above); forgotten on cancellation, the resend is taken as new while the
first copy is still being written (the test sees it answered instead of "still being stored"; let through, the
topic ends up with two copies).
"""

from __future__ import annotations

import pulsar
import pytest

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from storage.testing.processes import http_json
from storage.testing.waiting import wait_until
from tests.cluster.support import lookup
from tests.nemesis.fault_fixtures import fault_cluster  # noqa: F401  (fixture)
from tests.official_client.support import RawConnection

T = pb.BaseCommand
DEDUP = {"MAGNETAR_BROKER_DEDUPLICATION_ENABLED": "true"}
SLOW_FSYNC_MS = 5000  # long enough to drop the connection, reconnect and resend while the first store is pending
PRODUCER_NAME = "seed7-dedup"
PAYLOAD = b"stored-once"


class Producer:
    """One producer (id 1) on a hand-driven connection."""

    def __init__(self, broker, topic: str):
        self.raw = RawConnection(broker.port)
        self.raw.connect()
        self.topic = topic
        self.request_id = 0

    def create(self) -> None:
        """PRODUCER with the fixed name; again on the same id re-arms a producer refused with a retriable error
        (what a client does before resending)."""
        self.request_id += 1
        self.raw.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
            topic=self.topic, producer_id=1, request_id=self.request_id, producer_name=PRODUCER_NAME,
            user_provided_producer_name=True))))
        reply = self.next()
        assert reply.type == T.PRODUCER_SUCCESS, reply

    def next(self):
        """The next reply, answering the broker's keepalive PINGs on the way."""
        while (reply := self.raw.next()).type == T.PING:
            self.raw.send(encode_command(command(T.PONG, pong=pb.CommandPong())))
        return reply

    def send(self) -> None:
        md = pb.MessageMetadata(producer_name=PRODUCER_NAME, sequence_id=0, publish_time=1)
        self.raw.send(encode_payload_command(
            command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1)), md, PAYLOAD))

    def answer(self):
        """The SEND's answer: ("receipt", (ledger, entry)) or ("error", message)."""
        reply = self.next()
        if reply.type == T.SEND_RECEIPT:
            return "receipt", (reply.send_receipt.message_id.ledgerId, reply.send_receipt.message_id.entryId)
        assert reply.type == T.SEND_ERROR, reply
        return "error", reply.send_error.message


def _fsyncs(bookie) -> int:
    return http_json("GET", f"http://127.0.0.1:{bookie.http_port}/api/v1/bookie/faults")["fsyncs"]


def test_seed_7_dedup_resend_after_the_connection_dropped_mid_store_is_acknowledged(fault_cluster):
    cluster = fault_cluster(bookies=2, brokers=1, proxy=False, broker_env=DEDUP)
    (broker,) = cluster.brokers
    topic = "persistent://public/default/seed7-dedup-store"
    assert lookup(broker, topic, authoritative=True) == broker.service_url

    first = Producer(broker, topic)
    first.create()
    bookies = cluster.bookies.bookies
    before = {b.name: _fsyncs(b) for b in bookies}
    for b in bookies:
        b.set_journal_faults(SLOW_FSYNC_MS)
    first.send()
    # Both bookies are inside the (slow) fsync of this entry: the broker is waiting in the managed ledger's add.
    wait_until(lambda: all(_fsyncs(b) > before[b.name] for b in bookies), 15,
               "the entry's journal fsync on both bookies")
    first.raw.close()  # the connection drops while the store is pending; the broker cancels its tasks

    again = Producer(broker, topic)
    again.create()
    again.send()
    verdict, detail = again.answer()
    assert verdict == "error" and "still being stored" in detail, (verdict, detail)  # the first copy is in flight

    for b in bookies:
        b.set_journal_faults(0)
    answers = []

    def acknowledged():
        again.create()  # a retriable refusal holds the producer's later sends until it is created again
        again.send()
        answers.append(again.answer())
        return answers[-1][0] == "receipt"

    wait_until(acknowledged, 30, lambda: f"a receipt for the resend once the store finished; answers {answers[-3:]}",
               interval_s=0.2)
    again.raw.close()

    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        msg = reader.read_next(timeout_millis=20_000)
        assert (msg.data(), msg.producer_name()) == (PAYLOAD, PRODUCER_NAME)
        with pytest.raises(pulsar.Timeout):  # stored once: the resend was a duplicate, not a second copy
            reader.read_next(timeout_millis=1000)
    finally:
        client.close()
