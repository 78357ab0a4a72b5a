"""What a durable cursor persists, and the pure codec for it (no I/O here).

How it works:

- **The cursor ledger holds every state in full.** A state (mark-delete,
  properties, the ``AckRanges`` encoding, the batch-index acks) is one binary
  blob, cut into chunks of at most ``chunk_bytes``; each chunk is one entry,
  framed as msgpack ``[FORMAT, seq, index, count, bytes]``. Nothing is ever
  capped or dropped: a bigger state only takes more entries.
- **The last complete state is found from the last entry alone.** A state's
  chunks are written in order and back to back, so if the last entry is
  chunk ``i`` of ``n`` with ``i < n - 1`` (the writer died in the middle of a
  state), the previous state's final chunk is ``i + 1`` entries earlier; a
  final chunk names its ``n - 1`` predecessors, which must all carry its
  ``seq``. A half-written state is never mixed into the one restored.
- **The metadata-store snapshot is small.** It holds mark-delete and
  properties always, and the ranges and batch acks only when there are at
  most ``max_ranges`` of each; otherwise ``"acks_complete": false`` says the
  cursor ledger is the only full copy.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack

from storage.errors import CursorStateCorruptError
from storage.managed_ledger.ack_ranges import AckRanges
from storage.managed_ledger.position import Position

FORMAT = 2  # format 1 was one msgpack map per entry, with the ranges capped; still readable
_COUNT = struct.Struct("<I")


@dataclass
class CursorState:
    """Everything a durable cursor must restore exactly."""

    mark_delete: Position
    deleted: AckRanges = field(default_factory=AckRanges)
    batch_deleted: dict[Position, int] = field(default_factory=dict)  # position -> bitmask of acked batch indexes
    properties: dict[str, int] = field(default_factory=dict)
    seq: int = 0  # numbers the states written to the cursor ledger


class Chunk(NamedTuple):
    seq: int
    index: int
    count: int
    data: bytes


# ---- the cursor ledger: blob and chunks ------------------------------------------------


def encode_state(state: CursorState) -> bytes:
    return msgpack.packb({
        "mark_delete": list(state.mark_delete), "properties": state.properties, "seq": state.seq,
        "acks": state.deleted.encode(), "batch": encode_batch(state.batch_deleted),
    })


def decode_state(blob: bytes) -> CursorState:
    """Raises CursorStateCorruptError when the blob is not a state ``encode_state`` wrote."""
    try:
        doc = msgpack.unpackb(blob, strict_map_key=False)
        return CursorState(Position(*doc["mark_delete"]), AckRanges.decode(doc["acks"]), decode_batch(doc["batch"]),
                           {str(k): int(v) for k, v in doc["properties"].items()}, int(doc["seq"]))
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as exc:
        raise CursorStateCorruptError(f"cursor state cannot be decoded: {exc}") from exc


def frame_chunks(blob: bytes, seq: int, chunk_bytes: int) -> list[bytes]:
    """The entries that carry ``blob`` (at least one, each payload at most ``chunk_bytes``)."""
    parts = [blob[i:i + chunk_bytes] for i in range(0, len(blob), chunk_bytes)] or [b""]
    return [msgpack.packb([FORMAT, seq, i, len(parts), part]) for i, part in enumerate(parts)]


def parse_entry(payload: bytes) -> Chunk | CursorState:
    """A chunk, or a whole state written in format 1."""
    try:
        doc = msgpack.unpackb(payload, strict_map_key=False)
        if isinstance(doc, dict):
            return state_from_doc(doc)
        fmt, seq, index, count, data = doc
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise CursorStateCorruptError(f"cursor ledger entry cannot be decoded: {exc}") from exc
    if fmt != FORMAT or not 0 <= index < count or not isinstance(data, bytes):
        raise CursorStateCorruptError(f"cursor ledger entry is not a chunk of format {FORMAT}: {fmt}, {index}/{count}")
    return Chunk(seq, index, count, data)


def join_chunks(chunks: list[Chunk]) -> bytes:
    """The blob of one state from all of its chunks, checked to belong together."""
    final = chunks[-1]
    if [c.index for c in chunks] != list(range(final.count)) or any(c.seq != final.seq or c.count != final.count for c in chunks):
        raise CursorStateCorruptError(f"cursor state {final.seq}: its {final.count} chunks are not all there in order")
    return b"".join(c.data for c in chunks)


def previous_final_chunk(entry_id: int, chunk: Chunk) -> int:
    """Where the state before the one ``chunk`` belongs to ends (-1: there is none in this ledger)."""
    return entry_id - chunk.index - 1


# ---- batch-index acks ----------------------------------------------------------------


def encode_batch(batch: dict[Position, int]) -> bytes:
    keys = sorted(batch)
    masks = [batch[p].to_bytes((batch[p].bit_length() + 7) // 8, "little") for p in keys]
    positions = array("q", [n for p in keys for n in p])
    sizes = array("I", map(len, masks))
    if sys.byteorder == "big":
        positions.byteswap()
        sizes.byteswap()
    return zlib.compress(_COUNT.pack(len(keys)) + positions.tobytes() + sizes.tobytes() + b"".join(masks), 1)


def decode_batch(data: bytes) -> dict[Position, int]:
    try:
        raw = zlib.decompress(data)
    except zlib.error as exc:
        raise CursorStateCorruptError(f"batch acks: {exc}") from exc
    if len(raw) < _COUNT.size:
        raise CursorStateCorruptError("batch acks: shorter than their header")
    (n,) = _COUNT.unpack_from(raw)
    positions, sizes = array("q"), array("I")
    offset = _COUNT.size
    positions.frombytes(raw[offset:offset + 2 * n * positions.itemsize])
    offset += 2 * n * positions.itemsize
    sizes.frombytes(raw[offset:offset + n * sizes.itemsize])
    offset += n * sizes.itemsize
    if len(positions) != 2 * n or len(sizes) != n or offset + sum(sizes) != len(raw):
        raise CursorStateCorruptError(f"batch acks: {len(raw)} bytes do not hold {n} entries")
    if sys.byteorder == "big":
        positions.byteswap()
        sizes.byteswap()
    out = {}
    for k in range(n):
        out[Position(positions[2 * k], positions[2 * k + 1])] = int.from_bytes(raw[offset:offset + sizes[k]], "little")
        offset += sizes[k]
    return out


def mask_indexes(mask: int) -> frozenset[int]:
    return frozenset(i for i, bit in enumerate(reversed(bin(mask)[2:])) if bit == "1")


# ---- the metadata-store snapshot and format 1 --------------------------------------------


def snapshot_doc(state: CursorState, max_ranges: int) -> dict:
    """JSON-able; the ranges and batch acks are in it only when there are at most ``max_ranges`` of each."""
    doc = {"mark_delete": list(state.mark_delete), "properties": state.properties}
    if state.deleted.range_count <= max_ranges and len(state.batch_deleted) <= max_ranges:
        doc["deleted"] = [list(r) for r in state.deleted.ranges()]
        doc["batch_deleted"] = {f"{p.ledger_id}:{p.entry_id}": sorted(mask_indexes(m)) for p, m in state.batch_deleted.items()}
        doc["acks_complete"] = True
    else:
        doc["acks_complete"] = False
    return doc


def state_from_doc(doc: dict) -> CursorState:
    """A snapshot document, or a whole format-1 state (its ranges may have been capped when written)."""
    state = CursorState(Position(*doc["mark_delete"]), properties={k: int(v) for k, v in doc.get("properties", {}).items()})
    for ledger_id, first, last in doc.get("deleted", []):
        state.deleted.add_range(int(ledger_id), int(first), int(last))
    for key, indexes in doc.get("batch_deleted", {}).items():
        ledger_id, entry_id = map(int, key.split(":"))
        state.batch_deleted[Position(ledger_id, entry_id)] = sum(1 << int(i) for i in set(indexes))
    return state


def snapshot_is_complete(doc: dict) -> bool:
    return bool(doc.get("acks_complete", True))
