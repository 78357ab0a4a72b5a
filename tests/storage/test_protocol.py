"""Bookie wire codec: byte vectors, round trips, and fuzzing of the frame decoder."""

import struct

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from storage import protocol as p
from storage.errors import BadRequestError, FrameTooLargeError, MalformedRequestError


def frame(fields) -> bytes:
    body = msgpack.packb(fields, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def test_add_request_byte_vector():
    encoded = p.encode(p.AddRequest(rid=7, ledger_id=1, entry_id=2, flags=p.FLAG_RECOVERY, master_key=b"k", body=b"xy"))
    # length 13, then fixarray(7): ADD, 7, 1, 2, 1, bin8(1) "k", bin8(2) "xy"
    assert encoded == bytes.fromhex("0000000d" "97" "01" "07" "01" "02" "01" "c4016b" "c4027879")


@pytest.mark.parametrize(
    "message, side",
    [
        (p.AddRequest(1, 10, 0, 0, b"key", b"body"), "server"),
        (p.ReadRequest(2, 10, p.LAST_ENTRY, p.FLAG_FENCE, b"key"), "server"),
        (p.ReadLacRequest(3, 10), "server"),
        (p.BatchReadRequest(4, 10, 0, 99, 1 << 20), "server"),
        (p.AddResponse(1, p.OK, 10, 0), "client"),
        (p.ReadResponse(2, 2, 10, 5, None), "client"),
        (p.ReadResponse(2, p.OK, 10, 5, b"entry"), "client"),
        (p.ReadLacResponse(3, p.OK, 10, 41), "client"),
        (p.BatchReadResponse(4, p.OK, 10, [b"a", b"b"]), "client"),
        (p.ErrorResponse(-1, 8, "bad frame"), "client"),
    ],
)
def test_round_trip_every_message(message, side):
    assert p.FrameDecoder(side).feed(p.encode(message)) == [message]


def test_decoder_reassembles_frames_split_at_every_byte():
    messages = [p.AddRequest(i, 1, i, 0, b"k", bytes([i]) * i) for i in range(5)]
    stream = b"".join(p.encode(m) for m in messages)
    decoder = p.FrameDecoder("server")
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == messages


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=12), st.lists(st.integers(1, 700), min_size=1, max_size=40))
def test_decoder_gives_the_same_messages_for_any_split_of_the_stream(body_sizes, cuts):
    messages = [p.AddRequest(i, 1, i, 0, b"k", bytes([i % 256]) * n) for i, n in enumerate(body_sizes)]
    stream = b"".join(p.encode(m) for m in messages)
    decoder, out, pos, i = p.FrameDecoder("server"), [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += decoder.feed(stream[pos : pos + step])
        pos, i = pos + step, i + 1
    assert out == messages


def test_whole_frames_in_one_read_leave_nothing_buffered_and_a_partial_tail_waits():
    decoder = p.FrameDecoder("server")
    big = p.AddRequest(1, 1, 0, 0, b"k", b"e" * 65536)
    assert decoder.feed(p.encode(big) * 2) == [big, big]
    assert len(decoder._buf) == 0
    tail = p.encode(big)
    assert decoder.feed(p.encode(big) + tail[:100]) == [big]
    assert decoder.feed(tail[100:]) == [big] and len(decoder._buf) == 0


def test_oversized_frame_rejected_before_buffering_it():
    decoder = p.FrameDecoder("server", max_frame_bytes=1024)
    with pytest.raises(FrameTooLargeError, match="1025 bytes exceeds the 1024-byte limit"):
        decoder.feed(struct.pack(">I", 1025))


@pytest.mark.parametrize(
    "fields, message",
    [
        ([p.ADD, 1, 2], "ADD frame must have 7 fields"),
        ([p.ADD, 1, "ledger", 0, 0, b"k", b"b"], "expected integers"),
        ([p.READ, 1, 2, 3, 0, "not-bytes"], "READ key must be bytes"),
        ([99, 1], "unknown request op 99"),
        ({"op": 1}, "msgpack array starting"),
    ],
)
def test_malformed_requests_name_the_problem_and_keep_rid(fields, message):
    with pytest.raises(MalformedRequestError, match=message) as info:
        p.FrameDecoder("server").feed(frame(fields))
    if isinstance(fields, list) and len(fields) > 1:
        assert info.value.rid == fields[1]


def test_invalid_msgpack_is_malformed():
    with pytest.raises(MalformedRequestError, match="not valid msgpack"):
        p.FrameDecoder("server").feed(struct.pack(">I", 1) + b"\xc1")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decoder_raises_only_protocol_errors(data):
    decoder = p.FrameDecoder("server", max_frame_bytes=4096)
    try:
        for msg in decoder.feed(data):
            assert isinstance(msg, (p.AddRequest, p.ReadRequest, p.ReadLacRequest, p.BatchReadRequest))
    except (MalformedRequestError, FrameTooLargeError):
        pass


# ---- field bounds ----------------------------------------------------------------------------------------------

KEY = b"k" * 32
LIMITS = p.RequestLimits(max_batch_read_bytes=1000, max_batch_read_entries=10)


@pytest.mark.parametrize(
    "request_, field",
    [
        (p.AddRequest(-1, 1, 0, 0, KEY, b"x"), "request id"),
        (p.AddRequest(1, -1, 0, 0, KEY, b"x"), "ledger_id"),
        (p.AddRequest(1, 2**63, 0, 0, KEY, b"x"), "ledger_id"),
        (p.AddRequest(1, 1, -1, 0, KEY, b"x"), "entry_id"),
        (p.AddRequest(1, 1, 2**64 - 1, 0, KEY, b"x"), "entry_id"),
        (p.AddRequest(1, 1, 0, 2, KEY, b"x"), "flags"),
        (p.AddRequest(1, 1, 0, -1, KEY, b"x"), "flags"),
        (p.AddRequest(1, 1, 0, 0, b"k" * 65, b"x"), "master_key of 65 bytes"),
        (p.ReadRequest(1, 1, -2, 0, b""), "entry_id"),
        (p.ReadRequest(1, 1, 0, 2, b""), "flags"),
        (p.ReadRequest(1, 1, 0, 0, b"k" * 65), "master_key of 65 bytes"),
        (p.ReadLacRequest(1, -5), "ledger_id"),
        (p.ReadLacRequest(2**63, 5), "request id"),
        (p.BatchReadRequest(1, 1, -1, 5, 100), "first_entry_id"),
        (p.BatchReadRequest(1, 1, 6, 5, 100), "last_entry_id"),
        (p.BatchReadRequest(1, 1, 0, 2**63, 100), "last_entry_id"),
        (p.BatchReadRequest(1, 1, 0, 5, 0), "max_bytes"),
        (p.BatchReadRequest(1, 1, 0, 5, -(2**63)), "max_bytes"),
    ],
)
def test_a_field_out_of_bounds_is_a_bad_request_naming_it(request_, field):
    with pytest.raises(BadRequestError, match=field):
        p.bounded(request_, LIMITS)


@pytest.mark.parametrize(
    "request_",
    [
        p.AddRequest(0, 0, 0, 0, b"k", b""),
        p.AddRequest(2**63 - 1, 2**63 - 1, 2**63 - 1, p.FLAG_RECOVERY, b"k" * 64, b"x"),
        p.ReadRequest(1, 1, p.LAST_ENTRY, p.FLAG_FENCE, KEY),
        p.ReadRequest(1, 1, 5, 0, b""),
        p.ReadLacRequest(1, 0),
        p.BatchReadRequest(1, 1, 0, 9, 1000),
        p.BatchReadRequest(1, 1, 7, 7, 1),
    ],
)
def test_requests_within_bounds_pass_unchanged(request_):
    assert p.bounded(request_, LIMITS) is request_


@pytest.mark.parametrize(
    "first, last, max_bytes, capped",
    [
        (0, 2**63 - 1, 2**62, (0, 9, 1000)),  # "everything": ten entries, a thousand bytes
        (5, 100, 500, (5, 14, 500)),  # the count is capped, the size was within bounds
        (5, 6, 10**9, (5, 6, 1000)),  # the size is capped, the count was within bounds
    ],
)
def test_a_batch_read_asking_for_more_is_capped(first, last, max_bytes, capped):
    got = p.bounded(p.BatchReadRequest(3, 4, first, last, max_bytes), LIMITS)
    assert (got.rid, got.ledger_id) == (3, 4)
    assert (got.first_entry_id, got.last_entry_id, got.max_bytes) == capped


_ANY_INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # every integer msgpack carries


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.builds(p.AddRequest, _ANY_INT, _ANY_INT, _ANY_INT, _ANY_INT, st.binary(max_size=80), st.binary(max_size=8)),
    st.builds(p.ReadRequest, _ANY_INT, _ANY_INT, _ANY_INT, _ANY_INT, st.binary(max_size=80)),
    st.builds(p.ReadLacRequest, _ANY_INT, _ANY_INT),
    st.builds(p.BatchReadRequest, _ANY_INT, _ANY_INT, _ANY_INT, _ANY_INT, _ANY_INT),
))
def test_bounded_passes_only_requests_within_every_bound(request_):
    """Whatever a decoder can produce, bounded() answers BadRequest or a request whose every field is in range."""
    try:
        got = p.bounded(request_, LIMITS)
    except BadRequestError:
        return
    assert 0 <= got.rid <= p.MAX_ID and 0 <= got.ledger_id <= p.MAX_ID
    if isinstance(got, p.BatchReadRequest):
        assert 0 <= got.first_entry_id <= got.last_entry_id < got.first_entry_id + LIMITS.max_batch_read_entries
        assert 1 <= got.max_bytes <= LIMITS.max_batch_read_bytes
    elif isinstance(got, (p.AddRequest, p.ReadRequest)):
        assert p.LAST_ENTRY <= got.entry_id <= p.MAX_ID and got.flags >= 0 and len(got.master_key) <= 64
