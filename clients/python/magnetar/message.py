"""Messages and message ids, shaped like the official client's (``pulsar.Message``, ``pulsar.MessageId``)."""

from __future__ import annotations

import functools

from magnetar.protocol import pulsar_api_pb2 as pb

_U64 = (1 << 64) - 1


@functools.total_ordering
class MessageId:
    """(ledger id, entry id, batch index, partition). ``MessageId.earliest`` / ``MessageId.latest`` as in Pulsar."""

    earliest: "MessageId"
    latest: "MessageId"

    __slots__ = ("_ledger_id", "_entry_id", "_batch_index", "_partition", "_batch_size")

    def __init__(self, ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1, batch_size: int = 0):
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
        return cls(ledger, entry, data.batch_index, data.partition if partition is None else partition,
                   data.batch_size if data.HasField("batch_size") else 0)

    def serialize(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> "MessageId":
        msg = pb.MessageIdData()
        msg.ParseFromString(data)
        return cls.from_proto(msg)


MessageId.earliest = MessageId(-1, -1)
MessageId.latest = MessageId((1 << 63) - 1, (1 << 63) - 1)


class Message:
    """A received message."""

    __slots__ = ("_data", "_id", "_metadata", "_single", "_topic", "_redelivery_count", "chunks")

    def __init__(self, data: bytes, message_id: MessageId, metadata: pb.MessageMetadata,
                 single: pb.SingleMessageMetadata | None, topic: str, redelivery_count: int):
        self._data, self._id, self._metadata, self._single = data, message_id, metadata, single
        self._topic, self._redelivery_count = topic, redelivery_count
        self.chunks: list[tuple[int, int]] = []  # earlier chunk entries of a chunked message (acked with it)

    def data(self) -> bytes:
        return self._data

    def value(self):
        return self._data

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
