"""Where the messages of a producer batch lie, found without a protobuf object per message.

A batch payload is ``[u32 size][SingleMessageMetadata][payload]`` per message. ``split_batch`` (frames.py)
parses every SingleMessageMetadata into a protobuf object and slices every payload: right for a consumer
that hands out ``Message`` objects one by one, and most of the cost of a reader that wants columns (the
Spark source reads hundreds of thousands of messages a second this way). ``scan_batch`` finds the same
messages and checks the same things, but a SingleMessageMetadata that holds only ``payload_size`` and
``sequence_id`` -- what batching producers write for a message without key, properties or event time --
is matched by a compiled pattern (in C) instead of parsed; only the others become protobuf objects.
"""

from __future__ import annotations

import re
import struct

from google.protobuf.message import DecodeError

from . import pulsar_api_pb2 as pb
from .errors import ProtocolError

_U32 = struct.Struct(">I")

# Fields 3 (payload_size, varint: 1 to 5 bytes, as a non-negative int32 needs) then, optionally, 8 (sequence_id,
# a uint64 varint), and nothing else: protobuf writes fields in number order, and any other byte string (other
# fields, a repeated field, a negative payload_size's 10-byte varint) falls through to a real parse.
_PLAIN = re.compile(rb"\x18[\x80-\xff]{0,4}[\x00-\x7f](?:\x40[\x80-\xff]{0,9}[\x00-\x7f])?", re.DOTALL)


class BatchLayout:
    """The messages of one batch: payload ``i`` is ``batch[starts[i]:starts[i] + sizes[i]]``, its
    SingleMessageMetadata ``batch[meta_start(i):starts[i]]``. ``rich`` maps the index of every message whose
    metadata holds more than payload_size and sequence_id (key, properties, event time...) to its parsed
    SingleMessageMetadata; the others have none of those fields."""

    __slots__ = ("batch", "starts", "sizes", "rich")

    def __init__(self, batch: bytes, starts: list[int], sizes: list[int], rich: dict[int, pb.SingleMessageMetadata]):
        self.batch, self.starts, self.sizes, self.rich = batch, starts, sizes, rich

    def __len__(self) -> int:
        return len(self.starts)

    def meta_start(self, i: int) -> int:
        return 4 if i == 0 else self.starts[i - 1] + self.sizes[i - 1] + 4

    def single(self, i: int) -> pb.SingleMessageMetadata:
        smm = self.rich.get(i)
        if smm is None:
            smm = pb.SingleMessageMetadata.FromString(self.batch[self.meta_start(i):self.starts[i]])
        return smm

    def singles(self) -> list[pb.SingleMessageMetadata]:
        return [self.single(i) for i in range(len(self))]

    def payloads(self) -> list[bytes]:
        batch = self.batch
        return [batch[s:s + n] for s, n in zip(self.starts, self.sizes)]


def scan_batch(batch: bytes, count: int) -> BatchLayout:
    """The layout of a batch of ``count`` messages. Raises ProtocolError on truncation or a bad
    SingleMessageMetadata, exactly where ``split_batch`` does."""
    starts, sizes, rich = [], [], {}
    plain, parse, unpack = _PLAIN.fullmatch, pb.SingleMessageMetadata.FromString, _U32.unpack_from
    pos, end = 0, len(batch)
    try:
        for i in range(count):
            (n,) = unpack(batch, pos)  # struct.error when fewer than 4 bytes are left
            pos += 4
            stop = pos + n
            if stop > end:
                raise ProtocolError("truncated batch metadata")
            if plain(batch, pos, stop) is not None:
                size = batch[pos + 1]
                if size & 0x80:
                    size = _varint(batch, pos + 1)
            else:
                smm = parse(batch[pos:stop])
                size = smm.payload_size
                if size == 0 and not smm.HasField("payload_size"):
                    raise ProtocolError("SingleMessageMetadata missing required fields")
                rich[i] = smm
            if size < 0 or stop + size > end:
                raise ProtocolError("truncated batch payload")
            starts.append(stop)
            sizes.append(size)
            pos = stop + size
    except struct.error:
        raise ProtocolError("truncated batch") from None
    except (DecodeError, ValueError) as e:
        raise ProtocolError(f"bad SingleMessageMetadata: {e}") from e
    return BatchLayout(batch, starts, sizes, rich)


def _varint(data: bytes, pos: int) -> int:
    value, shift = 0, 0
    while True:
        b = data[pos]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        pos, shift = pos + 1, shift + 7
