"""Nothing a producer pipelined behind a refused SEND is stored before the refused one (nemesis seed 11).

``python -m loadtest.nemesis --seed 11 --rounds 15`` (with the network and disk faults registered): the owner of
a partition was paused past its session; resumed, it refused a magnetar producer's sends while re-verifying its
ownership (ServiceNotReady, retriable), then stored a later send of the same producer that was already in its
socket once ownership was back: in the log that message preceded the earlier ones the client resent (per-producer
order violated). Now a retriable refusal marks the producer's binding: every later SEND on it is refused the same
way until the client creates the producer again, after which it resends everything in order. The connection runs
on a recording transport with a topic that refuses the first publish; no broker behind it.
"""

from __future__ import annotations

from types import SimpleNamespace

from broker.config import BrokerConfig
from broker.errors import ServiceNotReadyError
from broker.server.connection import ServerConnection
from broker.server.handlers import ProducerBinding, on_producer, on_send
from broker.server.limits import ConnectionLimits, PublishBuffer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command, encode_payload_command
from storage.testing.waiting import wait_until_async
from tests.broker.support import RecordingTransport

T = pb.BaseCommand


class RefusesFirstPublish:
    """The topic seam: its ownership is being re-verified for the first publish, then it stores."""

    def __init__(self):
        self.stored: list[int] = []
        self.refusals = 1
        self.dedup = SimpleNamespace(last_sequence_id=lambda name: -1)
        self.rates = SimpleNamespace(on_send=lambda conn, messages, size: None)  # no publish rate limits

    async def publish(self, producer, sequence_id, highest_sequence_id, num_messages, data):
        if self.refusals:
            self.refusals -= 1
            raise ServiceNotReadyError("broker is re-verifying its ownership; retry")
        self.stored.append(sequence_id)
        return (9, len(self.stored) - 1)


def _frames(data: bytes) -> list:
    return FrameDecoder(1 << 20).feed(data)


def _send(seq: int):
    md = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    return _frames(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq, num_messages=1)), md,
                                          f"m{seq}".encode()))[0]


def _answers(transport) -> list[tuple[str, int]]:
    out = []
    for f in _frames(transport.written):
        if f.command.type == T.SEND_ERROR:
            out.append(("error", f.command.send_error.sequence_id))
        elif f.command.type == T.SEND_RECEIPT:
            out.append(("receipt", f.command.send_receipt.sequence_id))
    return out


async def test_seed_11_sends_behind_a_refused_one_are_refused_until_the_producer_is_created_again():
    service = SimpleNamespace(config=BrokerConfig("memory://unused"), connections=set(),
                              connection_limits=ConnectionLimits(), publish_buffer=PublishBuffer(0),
                              publish_rate=SimpleNamespace(on_send=lambda conn, messages, size: None))
    conn, transport = ServerConnection(service), RecordingTransport()
    conn.connection_made(transport)
    topic = RefusesFirstPublish()
    conn.producers[1] = ProducerBinding(SimpleNamespace(name="p", epoch=0, access_mode=SimpleNamespace(exclusive=False)),
                                        topic)
    for seq in range(3):  # pipelined: all three are on the connection before the first is answered
        on_send(conn, _send(seq))
    await wait_until_async(lambda: len(_answers(transport)) == 3, 5, "three answers")
    assert _answers(transport) == [("error", 0), ("error", 1), ("error", 2)]
    assert topic.stored == []  # nothing stored behind the refused one

    # The client creates the producer again (same id on this connection), then resends in order.
    transport.written = b""
    create = command(T.PRODUCER, producer=pb.CommandProducer(topic="persistent://public/default/t", producer_id=1,
                                                             request_id=5))
    on_producer(conn, _frames(encode_command(create))[0])
    for seq in range(3):
        on_send(conn, _send(seq))
    await wait_until_async(lambda: len(_answers(transport)) == 3, 5, "three receipts")
    assert _answers(transport) == [("receipt", 0), ("receipt", 1), ("receipt", 2)]
    assert topic.stored == [0, 1, 2]
