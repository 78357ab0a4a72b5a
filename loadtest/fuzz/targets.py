"""What each fuzz target feeds the bytes to, which exceptions are the decoder's documented answers, and seeds.

A target function takes one input and swallows only the decoders' documented errors, so anything that
escapes it is a crash. The decoders say in their docstrings what they raise on bad input:

* pulsar-frame: ``magnetar.protocol.frames`` (FrameDecoder, parse_headers_and_payload, split_batch) and the
  server side of ``magnetar.protocol.session`` raise ``ProtocolError`` (FrameTooLarge and the
  ProtocolViolation family are subclasses);
* bookie-request: ``storage.protocol.FrameDecoder("server")`` raises ``MalformedRequestError`` or
  ``FrameTooLargeError``; ``storage.protocol.bounded``, which each decoded request then goes through (as the
  bookie does), raises ``BadRequestError``.

The first input byte picks a split point, so the incremental decoders also see frames cut across two feeds.
Seeds are valid encodings made with the codecs themselves; libFuzzer mutates from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Bounds the targets apply, as the broker does: a consumer never unpacks more messages than a batch's bytes allow.
MAX_FRAME_BYTES = 64 * 1024
MAX_BATCH_COUNT = 10_000


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]  # what atheris instruments (imported inside instrument_imports)
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]


def _split(data: bytes) -> tuple[bytes, bytes]:
    if not data:
        return b"", b""
    cut = data[0] % (len(data))
    return data[1:1 + cut], data[1 + cut:]


# ---- pulsar-frame ------------------------------------------------------------------------------------------------


def pulsar_frame(data: bytes) -> None:
    from magnetar.protocol.errors import ProtocolError
    from magnetar.protocol.frames import FrameDecoder, parse_headers_and_payload, split_batch
    from magnetar.protocol.session import PulsarSession, Role

    head, tail = _split(data)
    try:
        decoder = FrameDecoder(max_frame_bytes=MAX_FRAME_BYTES)
        for frame in decoder.feed(head) + decoder.feed(tail):
            md = frame.metadata
            if md is not None and md.HasField("num_messages_in_batch") and md.num_messages_in_batch > 0:
                split_batch(frame.payload, min(md.num_messages_in_batch, MAX_BATCH_COUNT))
    except ProtocolError:
        pass
    try:
        parse_headers_and_payload(data)
    except ProtocolError:
        pass
    try:
        split_batch(data[1:], data[0] if data else 0)
    except ProtocolError:
        pass
    session = PulsarSession(Role.SERVER, max_frame_bytes=MAX_FRAME_BYTES)
    for chunk in (head, tail):
        try:
            session.receive_data(chunk)
        except ProtocolError:
            return
        while True:
            try:
                if session.next_event() is None:
                    break
            except ProtocolError:
                continue  # a violation drops that frame only; the session goes on with the next


def pulsar_seeds() -> list[bytes]:
    from magnetar.protocol import pulsar_api_pb2 as pb
    from magnetar.protocol.frames import (command, encode_command, encode_headers_and_payload,
                                          encode_payload_command, pack_batch)

    T = pb.BaseCommand
    connect = encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="seed", protocol_version=20)))
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    send = encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=1)), md, b"hello")
    batch_md = pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=1, num_messages_in_batch=3)
    batch = pack_batch([(pb.SingleMessageMetadata(payload_size=0, partition_key="k"), b"m%d" % i) for i in range(3)])
    send_batch = encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2,
                                                                           num_messages=3)), batch_md, batch)
    subscribe = encode_command(command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic="persistent://public/default/t", subscription="s", subType=pb.CommandSubscribe.Key_Shared,
        consumer_id=1, request_id=2, keySharedMeta=pb.KeySharedMeta(
            keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=100)]))))
    producer = encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
        topic="persistent://public/default/t", producer_id=1, request_id=1)))
    ack = encode_command(command(T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[
        pb.MessageIdData(ledgerId=3, entryId=4, ack_set=[5], batch_size=3)])))
    ping = encode_command(command(T.PING, ping=pb.CommandPing()))
    return [b"\x00" + connect, b"\x00" + send, b"\x00" + send_batch, b"\x10" + connect + producer + send + send_batch,
            b"\x00" + connect + subscribe + ack + ping, b"\x03" + batch, b"\x00" + encode_headers_and_payload(md, b"x")]


# ---- bookie-request ----------------------------------------------------------------------------------------------


def bookie_request(data: bytes) -> None:
    from storage.errors import BadRequestError, FrameTooLargeError, MalformedRequestError
    from storage.protocol import FrameDecoder, RequestLimits, bounded

    head, tail = _split(data)
    decoder = FrameDecoder("server", max_frame_bytes=MAX_FRAME_BYTES)
    requests = []
    try:
        requests += decoder.feed(head)
        requests += decoder.feed(tail)
    except (FrameTooLargeError, MalformedRequestError):
        pass
    for request in requests:
        try:
            bounded(request, RequestLimits())
        except BadRequestError:
            pass


def bookie_seeds() -> list[bytes]:
    from storage import protocol as p

    requests = [p.AddRequest(1, 7, 0, 0, b"key", b"body"), p.AddRequest(2, 7, 1, p.FLAG_RECOVERY, b"", b""),
                p.ReadRequest(3, 7, 0, 0, b"key"), p.ReadRequest(4, 7, p.LAST_ENTRY, p.FLAG_FENCE, b"key"),
                p.ReadLacRequest(5, 7), p.BatchReadRequest(6, 7, 0, 10, 1 << 20)]
    frames = [p.encode(r) for r in requests]
    return [b"\x00" + f for f in frames] + [b"\x20" + b"".join(frames)]


TARGETS = {
    "pulsar-frame": Target("pulsar-frame", ("magnetar.protocol",), pulsar_frame, pulsar_seeds),
    "bookie-request": Target("bookie-request", ("storage.protocol", "storage.errors"), bookie_request, bookie_seeds),
}
