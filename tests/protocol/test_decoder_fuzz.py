"""Fuzzing the frame decoder: arbitrary bytes only ever raise ProtocolError; valid streams survive any chunking."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import FrameDecoder, command, encode_command, encode_payload_command

T = pb.BaseCommand


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_protocol_errors(data):
    decoder = FrameDecoder(max_frame_bytes=4096)
    try:
        decoder.feed(data)
    except ProtocolError:
        pass  # FrameTooLarge is a ProtocolError too


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_garbage_inside_a_well_sized_frame_raises_protocol_error(body):
    decoder = FrameDecoder()
    try:
        decoder.feed(struct.pack(">I", len(body)) + body)
    except ProtocolError:
        pass


def _stream(payloads):
    frames = []
    for i, payload in enumerate(payloads):
        if payload is None:
            frames.append(encode_command(command(T.PING, ping=pb.CommandPing())))
        else:
            md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
            frames.append(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=i)), md, payload))
    return b"".join(frames)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=64)), min_size=1, max_size=8), st.data())
def test_valid_streams_survive_any_chunking(payloads, data):
    stream = _stream(payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    frames = []
    start = 0
    for cut in cuts + [len(stream)]:
        frames.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert len(frames) == len(payloads)
    for frame, payload in zip(frames, payloads):
        if payload is None:
            assert frame.command.type == T.PING
        else:
            assert frame.command.type == T.SEND and frame.payload == payload and frame.checksum_ok
