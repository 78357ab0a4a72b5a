"""scan_batch against split_batch: the same messages, the same errors, and protobuf objects only for rich metadata."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from magnetar.protocol import ProtocolError, pack_batch, pb, split_batch
from magnetar.protocol.batch_layout import scan_batch
from magnetar.protocol.frames import batch_message_header, plain_batch_message_header

_singles = st.builds(
    pb.SingleMessageMetadata,
    sequence_id=st.none() | st.integers(0, 2**64 - 1),
    partition_key=st.none() | st.text(max_size=5),
    event_time=st.none() | st.integers(0, 2**64 - 1),
    properties=st.lists(st.builds(pb.KeyValue, key=st.text(max_size=3), value=st.text(max_size=3)), max_size=2),
    compacted_out=st.none() | st.booleans(),
    ordering_key=st.none() | st.binary(max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_singles, st.binary(max_size=40)), max_size=12))
def test_scan_finds_what_split_finds(messages):
    batch = pack_batch(messages)
    singles, payloads = split_batch(batch, len(messages))
    layout = scan_batch(batch, len(messages))
    assert layout.payloads() == payloads
    assert layout.singles() == singles
    assert [layout.single(i) for i in range(len(messages))] == singles
    plain = {i for i, s in enumerate(singles) if {f.name for f, _ in s.ListFields()} <= {"payload_size", "sequence_id"}}
    assert set(layout.rich) == set(range(len(messages))) - plain
    assert all(layout.rich[i] == singles[i] for i in layout.rich)


@pytest.mark.parametrize("payload_size", [0, 1, 127, 128, 16384, 2**21])
@pytest.mark.parametrize("sequence_id", [None, 0, 127, 128, 2**35, 2**64 - 1])
def test_a_plain_message_needs_no_protobuf_object(payload_size, sequence_id):
    header = (plain_batch_message_header(payload_size, sequence_id) if sequence_id is not None else
              batch_message_header(pb.SingleMessageMetadata(payload_size=payload_size)))
    body = b"p" * payload_size
    layout = scan_batch(header + body + header + body, 2)
    assert layout.rich == {} and layout.payloads() == [body, body]
    assert layout.sizes == [payload_size] * 2


def test_a_repeated_or_unknown_field_is_parsed_by_protobuf():
    twice = b"\x18\x05\x18\x02"  # payload_size twice: protobuf keeps the last
    unknown = b"\x18\x02\x70\x01"  # field 14, unknown to us
    batch = struct.pack(">I", 4) + twice + b"ab" + struct.pack(">I", 4) + unknown + b"cd"
    layout = scan_batch(batch, 2)
    assert layout.payloads() == [b"ab", b"cd"] and sorted(layout.rich) == [0, 1]


def test_scan_rejects_every_truncation_and_bad_metadata_as_split_does():
    packed = pack_batch([(pb.SingleMessageMetadata(partition_key="k"), b"xy"),
                         (pb.SingleMessageMetadata(sequence_id=9), b"z" * 200)])
    for cut in range(len(packed)):
        with pytest.raises(ProtocolError):
            scan_batch(packed[:cut], 2)
    no_size = pb.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(ProtocolError, match="missing required"):
        scan_batch(struct.pack(">I", len(no_size)) + no_size, 1)
    with pytest.raises(ProtocolError, match="bad SingleMessageMetadata"):
        scan_batch(struct.pack(">I", 3) + b"\x1a\xff\xff", 1)
    negative = pb.SingleMessageMetadata(payload_size=-1).SerializeToString()
    with pytest.raises(ProtocolError, match="truncated batch payload"):
        scan_batch(struct.pack(">I", len(negative)) + negative + b"x" * 20, 1)
    assert len(scan_batch(packed, 0)) == 0
