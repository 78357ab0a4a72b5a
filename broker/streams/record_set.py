"""The bytes of one stream entry: a record set (DistributedLog's), a pure codec.

One append of n records is one ledger entry::

    magic "MS" | version 1 | flags 0 | first sequence u64 | publish time ms u64 | count u32
    then count times: length u32 | record bytes

The sequence numbers live in the entry, so whichever broker opens the stream
next finds where they stand by reading its last entry. Big-endian throughout.
``decode`` refuses anything malformed with RecordSetError naming what.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

from broker.errors import BrokerError

MAGIC = b"MS"
VERSION = 1
_HEADER = struct.Struct(">2sBBQQI")
_LENGTH = struct.Struct(">I")
HEADER_BYTES = _HEADER.size
RECORD_OVERHEAD = _LENGTH.size


class RecordSetError(BrokerError):
    """A stream entry that is not a well-formed record set."""


class RecordSet(NamedTuple):
    first_sequence: int
    publish_time_ms: int
    records: list[bytes]


def encoded_size(records: Sequence[bytes]) -> int:
    return HEADER_BYTES + sum(RECORD_OVERHEAD + len(r) for r in records)


def encode(first_sequence: int, publish_time_ms: int, records: Sequence[bytes]) -> bytes:
    parts = [_HEADER.pack(MAGIC, VERSION, 0, first_sequence, publish_time_ms, len(records))]
    for record in records:
        parts.append(_LENGTH.pack(len(record)))
        parts.append(bytes(record))
    return b"".join(parts)


def decode(data: bytes) -> RecordSet:
    if len(data) < HEADER_BYTES:
        raise RecordSetError(f"a record set needs {HEADER_BYTES} header bytes, got {len(data)}")
    magic, version, _flags, first, publish_ms, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise RecordSetError(f"not a version-{VERSION} record set (magic {magic!r}, version {version})")
    if count > (len(data) - HEADER_BYTES) // RECORD_OVERHEAD:
        raise RecordSetError(f"a record set of {len(data)} bytes cannot hold {count} records")
    view = memoryview(data)
    offset = HEADER_BYTES
    records: list[bytes] = []
    for i in range(count):
        if offset + RECORD_OVERHEAD > len(data):
            raise RecordSetError(f"record {i} of {count}: length runs past the entry")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += RECORD_OVERHEAD
        if offset + length > len(data):
            raise RecordSetError(f"record {i} of {count}: {length} bytes run past the entry")
        records.append(bytes(view[offset:offset + length]))
        offset += length
    if offset != len(data):
        raise RecordSetError(f"{len(data) - offset} bytes after the last of {count} records")
    return RecordSet(first, publish_ms, records)
