"""Messages and message ids, shaped like the official client's (``pulsar.Message``, ``pulsar.MessageId``),
and ``ReceivedEntry``: the messages of one ledger entry as a consumer received them."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from magnetar.protocol import pulsar_api_pb2 as pb

_U64 = (1 << 64) - 1


@functools.total_ordering
class MessageId:
    """(ledger id, entry id, batch index, partition). ``MessageId.earliest`` / ``MessageId.latest`` as in Pulsar.

    The constructor takes pulsar.MessageId's arguments in pulsar's order, ``(partition, ledger_id, entry_id,
    batch_index)``, so code written for the official client builds the same id; ``batch_size`` is ours.
    """

    earliest: "MessageId"
    latest: "MessageId"

    __slots__ = ("_ledger_id", "_entry_id", "_batch_index", "_partition", "_batch_size")

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1,
                 batch_size: int = 0):
        self._ledger_id, self._entry_id = ledger_id, entry_id
        self._batch_index, self._partition, self._batch_size = batch_index, partition, batch_size

    def ledger_id(self) -> int:
        return self._ledger_id

    def entry_id(self) -> int:
        return self._entry_id

    def batch_index(self) -> int:
        return self._batch_index

    def partition(self) -> int:
        return self._partition

    def batch_size(self) -> int:
        return self._batch_size

    def _key(self):
        return (self._ledger_id, self._entry_id, self._batch_index)

    def __eq__(self, other):
        return isinstance(other, MessageId) and self._key() == other._key() and self._partition == other._partition

    def __lt__(self, other):
        return self._key() < other._key()

    def __hash__(self):
        return hash((self._key(), self._partition))

    def __repr__(self):
        return f"({self._ledger_id},{self._entry_id},{self._batch_index},{self._partition})"

    __str__ = __repr__

    def to_proto(self) -> pb.MessageIdData:
        data = pb.MessageIdData(ledgerId=self._ledger_id & _U64, entryId=self._entry_id & _U64,
                                partition=self._partition, batch_index=self._batch_index)
        if self._batch_size:
            data.batch_size = self._batch_size
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData, partition: int | None = None) -> "MessageId":
        ledger = data.ledgerId - (1 << 64) if data.ledgerId >= 1 << 63 else data.ledgerId
        entry = data.entryId - (1 << 64) if data.entryId >= 1 << 63 else data.entryId
        return cls(ledger_id=ledger, entry_id=entry, batch_index=data.batch_index,
                   partition=data.partition if partition is None else partition,
                   batch_size=data.batch_size if data.HasField("batch_size") else 0)

    def serialize(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> "MessageId":
        msg = pb.MessageIdData()
        msg.ParseFromString(data)
        return cls.from_proto(msg)


MessageId.earliest = MessageId(ledger_id=-1, entry_id=-1)
MessageId.latest = MessageId(ledger_id=(1 << 63) - 1, entry_id=(1 << 63) - 1)


class Message:
    """A received message."""

    __slots__ = ("_data", "_id", "_metadata", "_single", "_topic", "_redelivery_count", "chunks", "_schema", "_writer")

    def __init__(self, data: bytes, message_id: MessageId, metadata: pb.MessageMetadata,
                 single: pb.SingleMessageMetadata | None, topic: str, redelivery_count: int):
        self._data, self._id, self._metadata, self._single = data, message_id, metadata, single
        self._topic, self._redelivery_count = topic, redelivery_count
        # Earlier chunk entries of a chunked message (acked with it); a shared empty tuple when not chunked.
        self.chunks: Sequence[tuple[int, int]] = ()
        # The consumer's schema and the one the message was written with (see AsyncConsumer), when it has one.
        self._schema = self._writer = None

    def data(self) -> bytes:
        return self._data

    def value(self):
        """The payload decoded with the consumer's schema (resolved against the writer's); bytes without one."""
        if self._schema is None:
            return self._data
        return self._schema.decode_with(self._data, self._writer)

    def schema_version(self) -> str:
        """The schema version the producer wrote with, as the official client gives it (a str of the 8 bytes)."""
        return self._metadata.schema_version.decode("latin-1")

    def int_schema_version(self) -> int:
        """The schema version as a number; -1 when the message has none."""
        raw = self._metadata.schema_version
        return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1

    def message_id(self) -> MessageId:
        return self._id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def _source(self):
        return self._single if self._single is not None else self._metadata

    def properties(self) -> dict[str, str]:
        return {kv.key: kv.value for kv in self._source().properties}

    def partition_key(self) -> str:
        return self._source().partition_key

    def ordering_key(self) -> bytes:
        return self._source().ordering_key

    def publish_timestamp(self) -> int:
        return self._metadata.publish_time

    def event_timestamp(self) -> int:
        return self._source().event_time

    def producer_name(self) -> str:
        return self._metadata.producer_name

    def __repr__(self):
        return f"Message(id={self._id}, {len(self._data)} bytes)"


class ReceivedEntry:
    """The messages of one ledger entry as received: a producer batch (or a single message), unpacked once.

    The consumer queues entries, not messages: a ``Message`` is made only when ``receive()`` hands one
    out, and a reader that wants columns (the Spark source, through ``AsyncConsumer.receive_entries``)
    reads them here without a Message, MessageId or property dict per message. ``indexes``, ``singles``
    and ``payloads`` are parallel: the batch index of each message kept (-1 for a message sent without
    batching), its ``SingleMessageMetadata`` (None without batching) and its payload. ``batch_size`` is
    the number of messages in the producer's batch (0 without batching), whether or not all were kept.

    A consumer read through ``receive_entries`` keeps a whole batch as its ``layout``
    (magnetar/protocol/batch_layout.py) instead: ``singles`` and ``payloads`` are then made only if asked
    for, and a columnar reader takes the payloads straight from the batch.
    """

    __slots__ = ("topic", "partition", "ledger_id", "entry_id", "batch_size", "metadata", "redelivery_count",
                 "indexes", "_singles", "_payloads", "chunks", "layout")

    def __init__(self, topic: str, partition: int, ledger_id: int, entry_id: int, batch_size: int,
                 metadata: pb.MessageMetadata, redelivery_count: int, indexes: Sequence[int],
                 singles: list | None, payloads: list[bytes] | None, chunks: Sequence[tuple[int, int]] = (),
                 layout=None):
        self.topic, self.partition, self.ledger_id, self.entry_id = topic, partition, ledger_id, entry_id
        self.batch_size, self.metadata, self.redelivery_count = batch_size, metadata, redelivery_count
        self.indexes, self._singles, self._payloads = indexes, singles, payloads
        self.chunks = chunks or ()  # earlier entries of a chunked message, acknowledged with it
        self.layout = layout  # a whole batch, unsplit (then indexes is every index of it)

    @property
    def singles(self) -> list:
        if self._singles is None:
            self._singles = self.layout.singles()
        return self._singles

    @property
    def payloads(self) -> list[bytes]:
        if self._payloads is None:
            self._payloads = self.layout.payloads()
        return self._payloads

    def __len__(self) -> int:
        return len(self.indexes)

    def __repr__(self):
        return f"ReceivedEntry({self.ledger_id}:{self.entry_id}, {len(self)} messages)"

    def message(self, i: int) -> Message:
        """The ``i``-th message kept (not the batch index ``i``)."""
        msg = Message(self.payloads[i], MessageId(self.partition, self.ledger_id, self.entry_id, self.indexes[i],
                                                  self.batch_size),
                      self.metadata, self.singles[i], self.topic, self.redelivery_count)
        if self.chunks:
            msg.chunks = self.chunks
        return msg

    def messages(self) -> list[Message]:
        return [self.message(i) for i in range(len(self))]

    def tail(self, first: int) -> "ReceivedEntry":
        """The messages from the ``first``-th kept on (what is left once some were handed out one by one)."""
        return ReceivedEntry(self.topic, self.partition, self.ledger_id, self.entry_id, self.batch_size,
                             self.metadata, self.redelivery_count, self.indexes[first:], self.singles[first:],
                             self.payloads[first:], self.chunks)

    # Columns: what the Message accessors of the same name give, for every message kept, in order.

    def message_ids(self) -> list[MessageId]:
        return [MessageId(self.partition, self.ledger_id, self.entry_id, i, self.batch_size) for i in self.indexes]

    def serialized_message_ids(self) -> list[bytes]:
        """``message_id().serialize()`` of each message, without a MessageId or protobuf object per message.

        Protobuf writes fields in field-number order and a concatenation of two encodings is their merge,
        so (ledger, entry, partition) + (batch_index) + (batch_size) encode the whole MessageIdData; the
        batch index part repeats from entry to entry and is cached. Tested byte for byte against serialize().
        """
        head = pb.MessageIdData(ledgerId=self.ledger_id & _U64, entryId=self.entry_id & _U64,
                                partition=self.partition).SerializeToString()
        tail = pb.MessageIdData(batch_size=self.batch_size).SerializePartialToString() if self.batch_size else b""
        return [head + _batch_index_field(i) + tail for i in self.indexes]

    def partition_keys(self) -> list[str]:
        if self.batch_size:
            return [s.partition_key for s in self.singles]
        return [self.metadata.partition_key] * len(self)

    def event_timestamps(self) -> list[int]:
        if self.batch_size:
            return [s.event_time for s in self.singles]
        return [self.metadata.event_time] * len(self)

    def properties(self) -> list[dict[str, str]]:
        if self.batch_size:
            return [{kv.key: kv.value for kv in s.properties} if s.properties else {} for s in self.singles]
        return [{kv.key: kv.value for kv in self.metadata.properties} for _ in range(len(self))]


@functools.lru_cache(maxsize=4096)
def _batch_index_field(index: int) -> bytes:
    """The encoding of MessageIdData's batch_index field alone (the required ids are left out on purpose)."""
    return pb.MessageIdData(batch_index=index).SerializePartialToString()
