"""The journal's record format, pure: a record's bytes, scanning a file's bytes back into records, and telling a
torn tail from damage that later writes followed (the framing is described in journal.py)."""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c

ADD = 1
FENCE = 2
MASTER_KEY = 3

_FRAME = struct.Struct(">II")  # length, crc32c of body
_KIND_LEDGER = struct.Struct(">Bq")
_ENTRY = struct.Struct(">q")

# A length field above this is garbage, not a record: entries are bounded by
# the frame limit (8 MiB by default), so this leaves ample headroom while
# stopping a corrupt length from making replay read gigabytes.
MAX_RECORD_BYTES = 256 * 1024 * 1024


class JournalRecord(NamedTuple):
    kind: int
    ledger_id: int
    entry_id: int = -1  # ADD only
    data: bytes = b""  # ADD: packaged entry; MASTER_KEY: the key


# ---- codec (pure) --------------------------------------------------------


def record_parts(record: JournalRecord) -> list[bytes]:
    """A record's bytes as pieces to write one after another, the entry's data not copied: a 5 MiB entry
    concatenated into its record was two more copies of it, made holding the GIL."""
    head = _KIND_LEDGER.pack(record.kind, record.ledger_id)
    if record.kind == ADD:
        head += _ENTRY.pack(record.entry_id)
        data = record.data
    elif record.kind == FENCE:
        data = b""
    elif record.kind == MASTER_KEY:
        data = record.data
    else:
        raise ValueError(f"unknown journal record type {record.kind}")
    frame = _FRAME.pack(len(head) + len(data), crc32c(data, crc32c(head)))
    return [frame + head, data] if data else [frame + head]


def encode_record(record: JournalRecord) -> bytes:
    return b"".join(record_parts(record))




def _decode_body(body: bytes) -> JournalRecord | None:
    if len(body) < _KIND_LEDGER.size:
        return None
    kind, ledger_id = _KIND_LEDGER.unpack_from(body)
    rest = body[_KIND_LEDGER.size :]
    if kind == ADD:
        if len(rest) < _ENTRY.size:
            return None
        (entry_id,) = _ENTRY.unpack_from(rest)
        return JournalRecord(ADD, ledger_id, entry_id, bytes(rest[_ENTRY.size :]))
    if kind == FENCE:
        return JournalRecord(FENCE, ledger_id) if not rest else None
    if kind == MASTER_KEY:
        return JournalRecord(MASTER_KEY, ledger_id, -1, bytes(rest))
    return None


class RecordScanner:
    """Iterates (record, end_offset) over a buffer of journal records.

    Stops at the end of the buffer or at the first record that is truncated,
    fails its CRC or does not decode; ``stopped_at`` is then that record's
    offset (None after a clean end). Pure: works on bytes, mmaps, memoryviews.
    """

    def __init__(self, buf, offset: int = 0):
        self._buf = memoryview(buf)
        self._offset = offset
        self.stopped_at: int | None = None
        self.reason = ""

    def __iter__(self) -> Iterator[tuple[JournalRecord, int]]:
        buf, pos, end = self._buf, self._offset, len(self._buf)
        while pos < end:
            if end - pos < _FRAME.size:
                self._stop(pos, "truncated record header")
                return
            length, crc = _FRAME.unpack_from(buf, pos)
            start = pos + _FRAME.size
            if length == 0 or length > MAX_RECORD_BYTES:
                self._stop(pos, f"implausible record length {length}")
                return
            if end - start < length:
                self._stop(pos, f"record of {length} bytes truncated to {end - start}")
                return
            body = buf[start : start + length]
            if crc32c(body) != crc:
                self._stop(pos, "record crc mismatch")
                return
            record = _decode_body(body)
            if record is None:
                self._stop(pos, "undecodable record body")
                return
            pos = start + length
            yield record, pos

    def _stop(self, pos: int, reason: str) -> None:
        self.stopped_at = pos
        self.reason = reason

    def release(self) -> None:
        self._buf.release()


def _verified_at(buf, pos: int, end: int):
    """(record, end offset) if a record that checks out starts at ``pos``, else None."""
    if end - pos < _FRAME.size:
        return None
    length, crc = _FRAME.unpack_from(buf, pos)
    start = pos + _FRAME.size
    if length == 0 or length > MAX_RECORD_BYTES or end - start < length:
        return None
    body = buf[start : start + length]
    if crc32c(body) != crc:
        return None
    record = _decode_body(body)
    return None if record is None else (record, start + length)


def records_after(buf, damaged_at: int) -> tuple[int, frozenset[int]]:
    """Valid-looking records after the bad record at ``damaged_at``: (count, their ledger ids).

    For classifying damage only -- these records are never applied (see the
    module docstring). To keep random garbage from passing for a record (a
    CRC32C matches by chance once in 2**32 positions), a candidate counts only
    if it ends exactly at the end of the buffer or another such record follows it.
    """
    buf = memoryview(buf)
    end = len(buf)
    pos = damaged_at + 1
    count = 0
    ledgers: set[int] = set()
    try:
        while pos < end:
            found = _verified_at(buf, pos, end)
            if found is None or (found[1] != end and _verified_at(buf, found[1], end) is None):
                pos += 1
                continue
            while found is not None:  # follow the chain
                record, pos = found
                count += 1
                ledgers.add(record.ledger_id)
                found = _verified_at(buf, pos, end)
        return count, frozenset(ledgers)
    finally:
        buf.release()


class JournalDamage(NamedTuple):
    """Where replay of one journal file stopped early, and what follows the bad record."""

    file_id: int
    path: Path
    offset: int
    reason: str
    records_after: int  # valid-looking records after it in the same file (not replayed)
    named_ledgers: frozenset[int]  # their ledger ids: hints only, never trusted as data
    later_file_nonempty: bool  # a later journal file holds bytes

    @property
    def torn_tail(self) -> bool:
        """What a crash mid-write leaves: nothing after the bad bytes, in this file or a later one.

        A group is written only after the previous one is synced and each
        start opens a fresh file (deleting the old ones at its first
        checkpoint), so a crash can tear only the last group of the last
        written file. Anything written after the bad bytes means they had
        been synced -- possibly acknowledged -- before they went bad.
        """
        return self.records_after == 0 and not self.later_file_nonempty

    def describe(self) -> str:
        what = f"journal {self.path} is corrupt at offset {self.offset} ({self.reason})"
        if self.records_after:
            return f"{what}, followed by {self.records_after} valid records"
        if self.later_file_nonempty:
            return f"{what}, and later journal files were written after it"
        return f"{what} (torn tail)"
