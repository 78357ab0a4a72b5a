"""What compaction keeps, as pure functions over stored entries (no I/O here).

How it works (Pulsar's two-phase compaction):

- **Phase one** folds every message up to the horizon into ``latest``: key ->
  the id (position, batch index) of its newest message. A tombstone (a
  ``null_value`` message, or an empty payload, as Pulsar reads it) removes
  the key.
- **Phase two** reads the same messages again and keeps a message when it is
  its key's entry in ``latest``. A keyless message is kept only when
  ``retain_null_key`` (Pulsar 3.2's ``topicCompactionRetainNullKey``,
  default off). A batch with some messages dropped is rewritten as a batch
  of the kept messages alone, so they get new batch indexes 0..k-1 within
  their entry. (Pulsar keeps the batch's shape with empty ``compacted_out``
  placeholders instead; the official C++ client neither skips those nor, when
  they are skipped, ever completes the batch's acknowledgement -- its batch
  acker waits for every index -- so a durable compacted consumer would be
  given the batch again after each reconnect.)
- **The compacted ledger** holds one entry per kept entry: its original
  position (16 bytes) and the entry as a consumer receives it. Its entries
  are in position order, so a read position is found by binary search.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.errors import PersistenceError
from magnetar.compression import decompress
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import encode_headers_and_payload, pack_batch, parse_headers_and_payload, split_batch
from storage.managed_ledger import Position

CURSOR_NAME = "__compaction"
# The __compaction cursor's properties: the compacted ledger of its mark-delete (the horizon), as in Pulsar, and
# (ours) a ledger a run has created and not yet published, deleted on the next load if a crash left it behind.
COMPACTED_LEDGER = "CompactedTopicLedger"
PENDING_LEDGER = "CompactionPendingLedger"

_POSITION = struct.Struct(">qq")
NON_BATCH = -1


class CompactedEntryError(PersistenceError):
    """A compacted-ledger entry that cannot be decoded."""


@dataclass(frozen=True)
class KeyedMessage:
    batch_index: int  # -1 for a message sent without batching
    key: str | None
    tombstone: bool


def encode_compacted_entry(position: Position, data: bytes) -> bytes:
    return _POSITION.pack(position.ledger_id, position.entry_id) + data


def decode_compacted_entry(raw: bytes) -> tuple[Position, bytes]:
    if len(raw) < _POSITION.size:
        raise CompactedEntryError(f"compacted entry of {len(raw)} bytes has no position")
    ledger_id, entry_id = _POSITION.unpack_from(raw, 0)
    return Position(ledger_id, entry_id), raw[_POSITION.size:]


def _key(has_key: bool, key: str, null_key: bool) -> str | None:
    return key if has_key and not null_key else None


def _batch(metadata: pb.MessageMetadata, payload: bytes) -> tuple[list, list[bytes]]:
    count = metadata.num_messages_in_batch
    if metadata.compression:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    return split_batch(payload, count)


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def keyed_messages(data: bytes) -> list[KeyedMessage]:
    """The messages of one stored entry with their keys. Raises ProtocolError/CompressionError for bad bytes."""
    metadata, payload, _ = parse_headers_and_payload(data)
    if not is_batch(metadata):
        key = _key(metadata.HasField("partition_key"), metadata.partition_key, metadata.null_partition_key)
        return [KeyedMessage(NON_BATCH, key, metadata.null_value or not payload)]
    singles, payloads = _batch(metadata, payload)
    return [KeyedMessage(i, _key(s.HasField("partition_key"), s.partition_key, s.null_partition_key),
                         s.null_value or s.compacted_out or not p)
            for i, (s, p) in enumerate(zip(singles, payloads))]


MessageKey = tuple[Position, int]  # (position, batch index)


def fold_latest(latest: dict[str, MessageKey], position: Position, messages: list[KeyedMessage]) -> None:
    """Phase one for one entry: record each key's newest message; a tombstone forgets the key."""
    for m in messages:
        if m.key is None:
            continue
        if m.tombstone:
            latest.pop(m.key, None)
        else:
            latest[m.key] = (position, m.batch_index)


def kept(latest: dict[str, MessageKey], position: Position, m: KeyedMessage, retain_null_key: bool) -> bool:
    """Phase two's rule for one message."""
    if m.key is None:
        return retain_null_key and not m.tombstone
    return not m.tombstone and latest.get(m.key) == (position, m.batch_index)


def compacted_entry(data: bytes, position: Position, latest: dict[str, MessageKey], retain_null_key: bool) -> bytes | None:
    """The entry to write to the compacted ledger for the stored entry ``data`` (None: nothing of it is kept)."""
    messages = keyed_messages(data)
    keep = [kept(latest, position, m, retain_null_key) for m in messages]
    if not any(keep):
        return None
    if all(keep):
        return data
    metadata, payload, _ = parse_headers_and_payload(data)
    singles, payloads = _batch(metadata, payload)
    rebuilt = [(smm, body) for smm, body, k in zip(singles, payloads, keep) if k]
    packed = pack_batch(rebuilt)
    out = pb.MessageMetadata()
    out.CopyFrom(metadata)
    out.compression = pb.NONE
    out.uncompressed_size = len(packed)
    out.num_messages_in_batch = len(rebuilt)
    return encode_headers_and_payload(out, packed)


def last_batch_index(data: bytes) -> int:
    """The batch index of the last message of an entry (-1: not a batch)."""
    metadata, _, _ = parse_headers_and_payload(data)
    if not is_batch(metadata):
        return NON_BATCH
    return max(metadata.num_messages_in_batch, 1) - 1


def backlog_bytes(ledgers: list[tuple[int, int, int]], horizon: Position | None) -> int:
    """Bytes stored after ``horizon`` (all of them when None); ``ledgers`` is (id, entries, size) in order.
    Within the horizon's ledger the bytes are estimated pro rata, as Pulsar estimates a cursor's backlog size."""
    total = 0
    for ledger_id, entries, size in ledgers:
        if horizon is None or ledger_id > horizon.ledger_id:
            total += size
        elif ledger_id == horizon.ledger_id and entries > 0:
            after = max(0, entries - (horizon.entry_id + 1))
            total += size * after // entries
    return total


RETRY_AFTER_ERROR_S = 60.0  # an automatic run that failed is not tried again sooner (no failure loop per publish)


def should_compact(backlog: int, threshold: int, running: bool, since_failure_s: float | None = None) -> bool:
    """The automatic trigger: a threshold of 0 (or less) turns it off; ``since_failure_s`` is the time since the
    last run failed (None: it did not)."""
    if since_failure_s is not None and since_failure_s < RETRY_AFTER_ERROR_S:
        return False
    return threshold > 0 and not running and backlog >= threshold
