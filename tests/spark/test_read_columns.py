"""How a read task turns received entries into rows: which messages of an entry fall in (start, end], when the
range is done, and the Arrow columns built from an entry's columns (no broker, no Spark session)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from connectors.spark.offsets import Offset, message_key
from connectors.spark.rows import EntryColumns
from connectors.spark.source import _arrow_schema, _in_range
from magnetar.message import ReceivedEntry
from magnetar.protocol import pack_batch, pb
from magnetar.protocol.batch_layout import scan_batch

TOPIC = "persistent://public/default/t-partition-2"


def entry(entry_id: int, indexes, batch_size: int, ledger: int = 4) -> ReceivedEntry:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_123)
    if batch_size:
        singles = [pb.SingleMessageMetadata(payload_size=1, partition_key=f"k{i}" if i % 2 else "", event_time=i,
                                            properties=[pb.KeyValue(key="i", value=str(i))] if i % 3 else [])
                   for i in indexes]
    else:
        singles = [None]
    return ReceivedEntry(TOPIC, 2, ledger, entry_id, batch_size, md, 0, list(indexes), singles,
                         [b"v%d" % i for i in indexes])


def one_by_one(received: ReceivedEntry, start: Offset, end: Offset) -> tuple[list[int], bool]:
    """The rule message by message, as read_range applied it before it read whole entries."""
    kept = []
    for i in received.indexes:
        key = message_key(received.ledger_id, received.entry_id, i)
        if key <= start.bound():
            continue
        if key > end.bound():
            return kept, True
        kept.append(i)
        if (received.ledger_id, received.entry_id) == (end.ledger, end.entry) and (
                (end.batch_index >= 0 and i >= end.batch_index)
                or (end.batch_index < 0 and (i < 0 or i >= received.batch_size - 1))):
            return kept, True
    return kept, False


ENTRIES = [entry(5, range(6), 6), entry(5, [1, 2, 4], 6), entry(5, [-1], 0), entry(5, [0], 1)]
OFFSETS = [Offset(-1, -1), Offset(4, 4), Offset(4, 4, 2, 6), Offset(4, 6), Offset(4, 6, 0, 6)] + [
    Offset(4, 5, b, 6) for b in range(-1, 7)]


@pytest.mark.parametrize("received", ENTRIES, ids=repr)
def test_in_range_keeps_what_the_message_by_message_rule_keeps(received):
    for start, end in itertools.product(OFFSETS, OFFSETS):
        first, stop, done = _in_range(received, start, end)
        expected, expected_done = one_by_one(received, start, end)
        assert (received.indexes[first:stop], done) == (expected, expected_done), (start, end)


def test_rows_hold_each_message_s_fields():
    rows = EntryColumns("persistent://public/default/t", 2)
    rows.add(entry(5, range(4), 4), 1, 4)
    rows.add(entry(6, [-1], 0), 0, 1)
    batch = rows.record_batch(_arrow_schema()).to_pylist()
    assert [r["value"] for r in batch] == [b"v1", b"v2", b"v3", b"v-1"]
    assert [r["key"] for r in batch] == ["k1", None, "k3", None]
    assert [r["properties"] for r in batch] == [[("i", "1")], [("i", "2")], [], []]
    event_ms = [None if r["eventTime"] is None else round(r["eventTime"].timestamp() * 1000) for r in batch]
    assert event_ms == [1, 2, 3, None]  # event time 0 means none
    assert {r["topic"] for r in batch} == {"persistent://public/default/t"} and {r["partition"] for r in batch} == {2}
    assert {r["publishTime"].timestamp() for r in batch} == {1_700_000_000.123}
    assert [r["messageId"] for r in batch] == [m.message_id().serialize() for m in
                                               entry(5, range(4), 4).messages()[1:] + entry(6, [-1], 0).messages()]


def layout_entry(entry_id: int, messages, ledger: int = 4) -> ReceivedEntry:
    """A batch entry as a consumer read through receive_entries queues it: unsplit, with its layout."""
    batch = pack_batch(messages)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_456,
                            num_messages_in_batch=len(messages))
    return ReceivedEntry(TOPIC, 2, ledger, entry_id, len(messages), md, 0, range(len(messages)), None, None,
                         layout=scan_batch(batch, len(messages)))


def as_rows(messages) -> list[dict]:
    """What the schema says each message's row holds, from the Message accessors."""
    return [{"key": m.partition_key() or None, "value": m.data(), "messageId": m.message_id().serialize(),
             "publishMs": m.publish_timestamp(), "eventMs": m.event_timestamp() or None,
             "properties": sorted(m.properties().items())} for m in messages]


def from_batch(batch) -> list[dict]:
    return [{"key": r["key"], "value": r["value"], "messageId": r["messageId"],
             "publishMs": round(r["publishTime"].timestamp() * 1000),
             "eventMs": None if r["eventTime"] is None else round(r["eventTime"].timestamp() * 1000),
             "properties": sorted(r["properties"])} for r in batch.to_pylist()]


def test_columns_from_batch_layouts_are_the_columns_of_their_messages():
    mixed = [(pb.SingleMessageMetadata(sequence_id=i, partition_key="k%d" % i if i % 2 else None,
                                       event_time=1000 + i if i % 3 == 0 else None,
                                       properties=[pb.KeyValue(key="i", value=str(i))] if i == 4 else []),
              b"m%d" % i) for i in range(7)]
    plain = [(pb.SingleMessageMetadata(sequence_id=i), b"p" * i) for i in range(200)]  # indexes past 127 too
    entries = [(layout_entry(5, mixed), 2, 6), (entry(6, [-1], 0), 0, 1), (layout_entry(7, plain), 0, 200),
               (entry(8, [1, 2, 4], 6), 0, 3)]
    rows = EntryColumns("persistent://public/default/t", 2)
    for received, first, stop in entries:
        rows.add(received, first, stop)
    batch = rows.record_batch(_arrow_schema())
    expected = [m for received, first, stop in entries for m in received.messages()[first:stop]]
    assert from_batch(batch) == as_rows(expected)
    assert batch.num_rows == len(rows) == 4 + 1 + 200 + 3
    assert set(batch.column("topic").to_pylist()) == {"persistent://public/default/t"}
    assert set(batch.column("partition").to_pylist()) == {2}


def test_plain_batches_need_no_row_by_row_column():
    rows = EntryColumns("persistent://public/default/t", 0)
    rows.add(layout_entry(1, [(pb.SingleMessageMetadata(sequence_id=i), b"v") for i in range(3)]), 0, 3)
    batch = rows.record_batch(_arrow_schema())
    assert batch.column("key").null_count == batch.column("eventTime").null_count == 3
    assert batch.column("properties").to_pylist() == [[], [], []]
    assert rows.nbytes == 3


def test_a_read_task_builds_its_columns_without_importing_pandas():
    """pa.array() on Python objects imports pandas: about a second of every cold Spark worker's CPU."""
    code = textwrap.dedent("""
        import sys
        from connectors.spark.rows import EntryColumns
        from connectors.spark.source import _arrow_schema
        from magnetar.message import ReceivedEntry
        from magnetar.protocol import pack_batch, pb
        from magnetar.protocol.batch_layout import scan_batch
        batch = pack_batch([(pb.SingleMessageMetadata(sequence_id=i), b"v") for i in range(3)])
        md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3)
        entry = ReceivedEntry("t", 0, 1, 1, 3, md, 0, range(3), None, None, layout=scan_batch(batch, 3))
        rows = EntryColumns("persistent://public/default/t", 0)
        rows.add(entry, 0, 3)
        assert rows.record_batch(_arrow_schema()).num_rows == 3
        assert "pandas" not in sys.modules, "pandas was imported"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], timeout=120)
