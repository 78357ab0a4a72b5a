"""The compactor's pure decisions, from tables: what a run keeps, the placeholders of a batch, the trigger."""

from __future__ import annotations

import pytest

from broker.compaction import model
from magnetar.compression import compress
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import encode_headers_and_payload, pack_batch, parse_headers_and_payload, split_batch
from storage.managed_ledger import Position


def single(key: str | None, value: bytes, *, null_value: bool = False) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    if null_value:
        md.null_value = True
    return encode_headers_and_payload(md, value)


def batch(messages, compression: int = 0) -> bytes:
    singles = []
    for key, value in messages:
        smm = pb.SingleMessageMetadata(payload_size=len(value or b""))
        if key is not None:
            smm.partition_key = key
        if value is None:
            smm.null_value = True
        singles.append((smm, value or b""))
    packed = pack_batch(singles)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(messages),
                            uncompressed_size=len(packed), compression=compression)
    return encode_headers_and_payload(md, compress(compression, packed) if compression else packed)


def run(entries, retain_null_key=False):
    """Both phases over [(position, data)]: the compacted entries, as (position, [(key, value) kept])."""
    latest = {}
    for position, data in entries:
        model.fold_latest(latest, position, model.keyed_messages(data))
    out = []
    for position, data in entries:
        kept = model.compacted_entry(data, position, latest, retain_null_key)
        if kept is None:
            continue
        md, payload, ok = parse_headers_and_payload(kept)
        assert ok
        if md.HasField("num_messages_in_batch"):
            singles, payloads = split_batch(payload, md.num_messages_in_batch)
            out.append((position, [(s.partition_key, p) for s, p in zip(singles, payloads)]))
        else:
            out.append((position, [(md.partition_key, payload)]))
    return out


P = [Position(3, i) for i in range(10)]

CASES = [
    # (name, entries, retain_null_key, expected)
    ("last value wins", [(P[0], single("a", b"1")), (P[1], single("a", b"2"))], False, [(P[1], [("a", b"2")])]),
    ("empty payload is a tombstone", [(P[0], single("a", b"1")), (P[1], single("a", b""))], False, []),
    ("null_value is a tombstone", [(P[0], single("a", b"1")), (P[1], single("a", b"", null_value=True))], False, []),
    ("a value after a tombstone lives", [(P[0], single("a", b"1")), (P[1], single("a", b"")), (P[2], single("a", b"3"))],
     False, [(P[2], [("a", b"3")])]),
    ("keyless dropped by default", [(P[0], single(None, b"x")), (P[1], single("a", b"1"))], False, [(P[1], [("a", b"1")])]),
    ("keyless kept when asked", [(P[0], single(None, b"x")), (P[1], single("a", b"1"))], True,
     [(P[0], [("", b"x")]), (P[1], [("a", b"1")])]),
    ("a batch kept whole", [(P[0], batch([("a", b"1"), ("b", b"2")]))], False, [(P[0], [("a", b"1"), ("b", b"2")])]),
    ("a batch keeps only its kept messages", [(P[0], batch([("a", b"1"), ("b", b"2"), ("c", b"3")])),
                                              (P[1], single("b", b"9"))],
     False, [(P[0], [("a", b"1"), ("c", b"3")]), (P[1], [("b", b"9")])]),
    ("a tombstone inside a batch", [(P[0], batch([("a", b"1"), ("a", None)]))], False, []),
    ("a compressed batch", [(P[0], batch([("a", b"1" * 50), ("a", b"2" * 50)], compression=pb.ZLIB))], False,
     [(P[0], [("a", b"2" * 50)])]),
    ("keys repeat inside one batch", [(P[0], batch([("a", b"1"), ("b", b"2"), ("a", b"3")]))], False,
     [(P[0], [("b", b"2"), ("a", b"3")])]),
]


@pytest.mark.parametrize("entries, retain, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_a_run_keeps(entries, retain, expected):
    assert run(entries, retain) == expected


def test_a_rewritten_batch_counts_only_its_kept_messages():
    entries = [(P[0], batch([("a", b"1"), ("b", b"2"), ("a", b"3"), ("b", b"")]))]
    latest = {}
    model.fold_latest(latest, P[0], model.keyed_messages(entries[0][1]))
    kept = model.compacted_entry(entries[0][1], P[0], latest, False)
    md, _, _ = parse_headers_and_payload(kept)
    assert md.num_messages_in_batch == 1 and md.compression == pb.NONE
    assert model.last_batch_index(kept) == 0
    assert model.last_batch_index(entries[0][1]) == 3
    assert model.last_batch_index(single("a", b"1")) == -1


def test_compacted_entry_codec():
    raw = model.encode_compacted_entry(Position(7, 42), b"data")
    assert model.decode_compacted_entry(raw) == (Position(7, 42), b"data")
    with pytest.raises(model.CompactedEntryError):
        model.decode_compacted_entry(b"short")


@pytest.mark.parametrize("ledgers, horizon, expected", [
    ([(1, 10, 1000), (2, 5, 500)], None, 1500),
    ([(1, 10, 1000), (2, 5, 500)], Position(1, 9), 500),
    ([(1, 10, 1000), (2, 5, 500)], Position(1, 4), 1000),  # half of ledger 1, pro rata
    ([(1, 10, 1000), (2, 5, 500)], Position(2, 4), 0),
    ([(2, 5, 500)], Position(1, 9), 500),  # the horizon's ledger was trimmed
    ([(1, 0, 0)], Position(1, -1), 0),
])
def test_backlog_bytes(ledgers, horizon, expected):
    assert model.backlog_bytes(ledgers, horizon) == expected


@pytest.mark.parametrize("backlog, threshold, running, expected", [
    (100, 0, False, False),  # 0 = off
    (100, -1, False, False),
    (99, 100, False, False),
    (100, 100, False, True),
    (1000, 100, True, False),  # one run at a time
])
def test_should_compact(backlog, threshold, running, expected):
    assert model.should_compact(backlog, threshold, running) is expected


@pytest.mark.parametrize("since_failure_s, expected", [(None, True), (0.0, False), (59.9, False), (60.0, True)])
def test_a_failed_run_is_not_retried_at_once(since_failure_s, expected):
    assert model.should_compact(1000, 100, False, since_failure_s) is expected
