"""The cursor-state codec and the walk to the last complete state, on scripted ledger contents (pure)."""

from __future__ import annotations

import random

import msgpack
import pytest

from storage.errors import CursorStateCorruptError
from storage.managed_ledger.cursor_ledger import read_latest_state as _read_latest_state
from storage.managed_ledger.cursor_state import (
    CursorState, decode_batch, decode_state, encode_batch, encode_state, frame_chunks, join_chunks, parse_entry,
)
from storage.managed_ledger.position import Position


def state(mark: int, acked=(), seq: int = 1) -> CursorState:
    s = CursorState(Position(1, mark), seq=seq, properties={"p": mark})
    for e in acked:
        s.deleted.add(1, e)
    s.batch_deleted[Position(1, mark + 1)] = 0b1011
    return s


def blob_of(s: CursorState) -> bytes:
    return encode_state(s)


def test_state_round_trip_with_batch_acks():
    s = state(3, range(5, 400, 3))
    back = decode_state(encode_state(s))
    assert back.mark_delete == s.mark_delete and back.properties == s.properties and back.seq == s.seq
    assert list(back.deleted.ranges()) == list(s.deleted.ranges())
    assert back.batch_deleted == {Position(1, 4): 0b1011}


def test_batch_masks_round_trip_at_any_width():
    batch = {Position(7, 1): 1, Position(7, 2): (1 << 999) | 5, Position(2, 0): 0}
    assert decode_batch(encode_batch(batch)) == batch


@pytest.mark.parametrize("size, chunk, count", [(0, 256, 1), (256, 256, 1), (257, 256, 2), (10_000, 1000, 10)])
def test_chunks_hold_at_most_chunk_bytes(size, chunk, count):
    blob = bytes(range(256)) * (size // 256) + bytes(size % 256)
    entries = frame_chunks(blob, 4, chunk)
    chunks = [parse_entry(e) for e in entries]
    assert len(chunks) == count and all(len(c.data) <= chunk for c in chunks)
    assert join_chunks(chunks) == blob


def test_join_refuses_chunks_of_different_states():
    a = [parse_entry(e) for e in frame_chunks(b"x" * 600, 1, 256)]
    b = [parse_entry(e) for e in frame_chunks(b"y" * 600, 2, 256)]
    with pytest.raises(CursorStateCorruptError):
        join_chunks([a[0], b[1], a[2]])


@pytest.mark.parametrize("payload", [b"\xc1", msgpack.packb([9, 1, 0, 1, b""]), msgpack.packb([2, 1, 3, 2, b""]),
                                     msgpack.packb("text")])
def test_parse_refuses_what_is_not_a_chunk(payload):
    with pytest.raises(CursorStateCorruptError):
        parse_entry(payload)


class ScriptedLedger:
    """A cursor ledger's entries in a list: what the walk reads, nothing else."""

    ledger_id = 99

    def __init__(self, payloads):
        self.payloads = payloads
        self.last_add_confirmed = len(payloads) - 1

    async def read_entry(self, entry_id):
        return _E(entry_id, self.payloads[entry_id])

    async def read_entries(self, first, last):
        return [_E(e, self.payloads[e]) for e in range(first, last + 1)]


class _E:
    def __init__(self, entry_id, payload):
        self.entry_id, self.payload = entry_id, payload


def scattered(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)  # irregular holes: they do not compress into one chunk
    return [e for e in range(10, n) if rng.random() < 0.5]


A = state(2, scattered(3000, 1), seq=1)
B = state(3, scattered(6000, 2), seq=2)
C = state(4, scattered(4000, 3), seq=3)


def chunks_of(s):
    return frame_chunks(blob_of(s), s.seq, 256)


@pytest.mark.parametrize("payloads, expected", [
    (lambda: chunks_of(A), A),
    (lambda: chunks_of(A) + chunks_of(B), B),
    (lambda: chunks_of(A) + chunks_of(B)[:2], A),  # B torn after two chunks
    (lambda: chunks_of(A) + chunks_of(B)[:1], A),
    (lambda: chunks_of(A) + chunks_of(B)[:2] + chunks_of(C), C),  # a torn state in the middle is passed over
    (lambda: chunks_of(A) + chunks_of(B)[:2] + chunks_of(C)[:1], "torn-twice"),
    (lambda: chunks_of(A)[:1], None),  # no complete state at all
    (lambda: [msgpack.packb({"mark_delete": [1, 7], "deleted": [[1, 9, 11]]})], "format-1"),
])
async def test_the_walk_finds_the_last_complete_state(payloads, expected):
    assert min(len(chunks_of(s)) for s in (A, B, C)) >= 3
    restored = await _read_latest_state(ScriptedLedger(payloads()))
    if expected is None:
        assert restored is None
    elif expected == "format-1":
        assert restored.mark_delete == Position(1, 7) and list(restored.deleted.ranges()) == [(1, 9, 11)]
    else:
        # after C was torn too, the walk steps back over C's chunk to B's torn chunks and on to A
        want = A if expected == "torn-twice" else expected
        assert restored.seq == want.seq and list(restored.deleted.ranges()) == list(want.deleted.ranges())
        assert restored.mark_delete == want.mark_delete and restored.batch_deleted == want.batch_deleted


async def test_a_final_chunk_without_its_predecessors_is_an_error():
    with pytest.raises(CursorStateCorruptError):
        await _read_latest_state(ScriptedLedger(chunks_of(B)[1:]))
