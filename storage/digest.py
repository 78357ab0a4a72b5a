"""Entry packaging with a CRC32C digest, as BookKeeper's DigestManager does.

A packaged entry is what the writer sends, what the bookie stores verbatim
and what readers get back:

    ledger_id  int64 big-endian
    entry_id   int64
    lac        int64   last add confirmed when this entry was written (-1: none)
    length     int64   ledger length in bytes up to and including this entry
    crc        uint32  CRC32C over the four fields above, then the payload
    payload    bytes

The bookie checks the digest on add (a corrupt add is rejected) and on read
(bit rot is reported, never returned as data); the reader checks it again and
also that the ids are the ones it asked for.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from storage.errors import DigestMismatchError

_FIELDS = struct.Struct(">qqqq")
_CRC = struct.Struct(">I")
HEADER_SIZE = _FIELDS.size + _CRC.size  # 36


class Entry(NamedTuple):
    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


def package(ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    fields = _FIELDS.pack(ledger_id, entry_id, lac, length)
    crc = crc32c(payload, crc32c(fields))
    return b"".join((fields, _CRC.pack(crc), payload))


def unpack(body: bytes) -> Entry:
    """Verify a packaged entry's digest and split it. Raises DigestMismatchError."""
    if len(body) < HEADER_SIZE:
        raise DigestMismatchError(f"packaged entry of {len(body)} bytes is shorter than its {HEADER_SIZE}-byte header")
    view = memoryview(body)
    (crc,) = _CRC.unpack_from(body, _FIELDS.size)
    actual = crc32c(view[HEADER_SIZE:], crc32c(view[: _FIELDS.size]))
    ledger_id, entry_id, lac, length = _FIELDS.unpack_from(body)
    if actual != crc:
        raise DigestMismatchError(
            f"digest mismatch for ledger {ledger_id} entry {entry_id}: stored crc {crc:#010x}, computed {actual:#010x}"
        )
    return Entry(ledger_id, entry_id, lac, length, bytes(view[HEADER_SIZE:]))


def verify_header(body: bytes, ledger_id: int, entry_id: int) -> tuple[int, int]:
    """verify() without splitting the payload off: (lac, length). A bookie storing an entry keeps it packaged, so
    copying its payload out (5 MiB for the largest message) would be thrown away at once."""
    if len(body) < HEADER_SIZE:
        raise DigestMismatchError(f"packaged entry of {len(body)} bytes is shorter than its {HEADER_SIZE}-byte header")
    view = memoryview(body)
    (crc,) = _CRC.unpack_from(body, _FIELDS.size)
    got_ledger, got_entry, lac, length = _FIELDS.unpack_from(body)
    if crc32c(view[HEADER_SIZE:], crc32c(view[: _FIELDS.size])) != crc:
        raise DigestMismatchError(f"digest mismatch for ledger {got_ledger} entry {got_entry}: stored crc {crc:#010x}")
    if got_ledger != ledger_id or got_entry != entry_id:
        raise DigestMismatchError(f"expected ledger {ledger_id} entry {entry_id}, got ledger {got_ledger} entry {got_entry}")
    return lac, length


def verify(body: bytes, ledger_id: int, entry_id: int) -> Entry:
    """unpack() plus a check that the entry is the one that was asked for."""
    entry = unpack(body)
    if entry.ledger_id != ledger_id or entry.entry_id != entry_id:
        raise DigestMismatchError(
            f"expected ledger {ledger_id} entry {entry_id}, got ledger {entry.ledger_id} entry {entry.entry_id}"
        )
    return entry


def peek_ids(body: bytes) -> tuple[int, int, int, int]:
    """(ledger_id, entry_id, lac, length) without verifying the digest."""
    return _FIELDS.unpack_from(body)
