"""The columns of one Arrow record batch, filled an entry at a time from the entries' column accessors (no Message
object or method call per row: building rows message by message was a third of a task). The raw source and the
schema-expanded source differ only in how an entry's values are made."""

from __future__ import annotations

from magnetar.message import _U64, _batch_index_field
from magnetar.protocol import pulsar_api_pb2 as pb


class MessageColumns:
    def __init__(self, topic: str):
        self.topic = topic
        self.keys, self.values, self.ids, self.publish_times, self.event_times, self.properties = [], [], [], [], [], []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.values)

    def entry_values(self, entry, kept: slice) -> list:
        """The values of the entry's messages in ``kept``: their payloads, unless a subclass decodes them."""
        return entry.payloads[kept]

    def add(self, entry, first: int, stop: int) -> None:
        """The entry's messages ``first`` to ``stop`` (exclusive)."""
        kept = slice(first, stop)
        self.nbytes += sum(map(len, entry.payloads[kept]))
        self.values += self.entry_values(entry, kept)
        self.keys += [key or None for key in entry.partition_keys()[kept]]
        self.ids += entry.serialized_message_ids()[kept]
        self.publish_times += [entry.metadata.publish_time * 1000] * (stop - first)
        self.event_times += [ms * 1000 or None for ms in entry.event_timestamps()[kept]]
        self.properties += entry.properties()[kept]


# Encoded MessageIdData.batch_index fields for the batch indexes a batch commonly has: an id column joins slices of
# this list in C instead of building bytes per message. Larger indexes (batches of more messages) are made per row.
_INDEX_FIELDS_CACHED = 1 << 16
_index_fields: list[bytes] = []


def _index_fields_for(indexes) -> list[bytes]:
    if isinstance(indexes, range) and indexes.step == 1 and 0 <= indexes.start and indexes.stop <= _INDEX_FIELDS_CACHED:
        if len(_index_fields) < indexes.stop:
            _index_fields.extend(_batch_index_field(i) for i in range(len(_index_fields), indexes.stop))
        return _index_fields[indexes.start:indexes.stop]
    return [_batch_index_field(i) for i in indexes]


class EntryColumns:
    """The raw schema's columns of one Arrow record batch, built from whole entries when the batch is made.

    ``add`` only notes (entry, first, stop). ``record_batch`` then joins each entry's payloads and message ids
    into Arrow buffers with C-level joins, and repeats what is constant per entry (topic, partition, publish
    time), so a message that has no key, properties or event time costs no Python object of its own: its
    payload is found in the batch by ``ReceivedEntry.layout`` (magnetar/protocol/batch_layout.py). Only the
    messages that have such fields ("rich" ones) are visited one by one.
    """

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self._parts: list[tuple] = []
        self._rows = 0
        self.nbytes = 0  # payload bytes so far: the reader bounds a record batch by bytes as well as rows

    def __len__(self) -> int:
        return self._rows

    def add(self, entry, first: int, stop: int) -> None:
        """The entry's messages ``first`` to ``stop`` (exclusive, positions among the messages it kept)."""
        layout = entry.layout
        if layout is not None:
            values = layout.batch, layout.starts[first:stop], layout.sizes[first:stop]
            self.nbytes += sum(values[2])
        else:
            values = entry.payloads[first:stop]
            self.nbytes += sum(map(len, values))
        self._parts.append((entry, first, stop, values))
        self._rows += stop - first

    def record_batch(self, schema):
        import numpy as np
        import pyarrow as pa

        n = self._rows
        data, sizes, ids, id_sizes, publish, counts, rich = [], [], [], [], [], [], []
        row = 0
        for entry, first, stop, values in self._parts:
            if entry.layout is not None:
                batch, starts, lengths = values
                data.append(b"".join([batch[s:s + size] for s, size in zip(starts, lengths)]))
                sizes.append(np.asarray(lengths, dtype=np.int64))
                rich.extend((row + i - first, smm) for i, smm in entry.layout.rich.items() if first <= i < stop)
            else:
                data.append(b"".join(values))
                sizes.append(np.fromiter(map(len, values), dtype=np.int64, count=stop - first))
                sources = entry.singles[first:stop] if entry.batch_size else [entry.metadata]
                rich.extend((row + k, smm) for k, smm in enumerate(sources))
            head, tail = _id_head_and_tail(entry)
            fields = _index_fields_for(entry.indexes[first:stop])
            ids.append(head + (tail + head).join(fields) + tail)
            id_sizes.append(np.fromiter(map(len, fields), dtype=np.int64, count=stop - first) + len(head) + len(tail))
            publish.append(entry.metadata.publish_time * 1000)
            counts.append(stop - first)
            row += stop - first
        topic = self.topic.encode()
        columns = {
            "value": _binary(pa.binary(), n, np.concatenate(sizes) if sizes else [], b"".join(data)),
            "messageId": _binary(pa.binary(), n, np.concatenate(id_sizes) if id_sizes else [], b"".join(ids)),
            "topic": _binary(pa.string(), n, np.full(n, len(topic)), topic * n),
            "partition": _fixed(pa.int32(), np.full(n, self.partition, dtype=np.int32)),
            "publishTime": _fixed(schema.field("publishTime").type,
                                  np.repeat(np.asarray(publish, dtype=np.int64), counts)),
        }
        columns.update(_rich_columns(schema, n, rich))
        return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def _id_head_and_tail(entry) -> tuple[bytes, bytes]:
    """A serialized MessageIdData is head + batch_index field + tail (see ReceivedEntry.serialized_message_ids)."""
    head = pb.MessageIdData(ledgerId=entry.ledger_id & _U64, entryId=entry.entry_id & _U64,
                            partition=entry.partition).SerializeToString()
    tail = pb.MessageIdData(batch_size=entry.batch_size).SerializePartialToString() if entry.batch_size else b""
    return head, tail


# Arrays are made from buffers: pa.array() on Python objects would also import pandas into every Spark worker
# (about a second of a cold task's CPU), and nothing else in a read task needs it.
def _binary(type_, n: int, sizes, data: bytes):
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(n + 1, dtype=np.int32)
    if n:
        np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _fixed(type_, values):
    import pyarrow as pa

    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _rich_columns(schema, n: int, rich: list[tuple[int, object]]) -> dict:
    """key, eventTime and properties: all null / empty unless some message has them (``rich``: its row and
    its SingleMessageMetadata, or the entry's MessageMetadata for a message sent without batching)."""
    import numpy as np
    import pyarrow as pa

    ts, props = schema.field("eventTime").type, schema.field("properties").type
    keys = times = properties = None
    for row, smm in rich:
        if smm.partition_key:
            keys = keys or [None] * n
            keys[row] = smm.partition_key
        if smm.event_time:
            times = times or [None] * n
            times[row] = smm.event_time * 1000
        if smm.properties:
            properties = properties or [[]] * n
            properties[row] = {kv.key: kv.value for kv in smm.properties}
    if properties is None:
        empty = _binary(pa.string(), 0, [], b"")
        properties = pa.MapArray.from_arrays(_fixed(pa.int32(), np.zeros(n + 1, dtype=np.int32)), empty, empty,
                                             type=props)
    else:
        properties = pa.array(properties, props)
    return {
        "key": pa.nulls(n, pa.string()) if keys is None else pa.array(keys, pa.string()),
        "eventTime": pa.nulls(n, ts) if times is None else pa.array(times, ts),
        "properties": properties,
    }
