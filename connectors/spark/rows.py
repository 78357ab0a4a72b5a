"""The columns of one Arrow record batch, filled an entry at a time from the entries' column accessors (no Message
object or method call per row: building rows message by message was a third of a task). The raw source and the
schema-expanded source differ only in how an entry's values are made."""

from __future__ import annotations


class MessageColumns:
    def __init__(self, topic: str):
        self.topic = topic
        self.keys, self.values, self.ids, self.publish_times, self.event_times, self.properties = [], [], [], [], [], []

    def __len__(self) -> int:
        return len(self.values)

    def entry_values(self, entry, kept: slice) -> list:
        """The values of the entry's messages in ``kept``: their payloads, unless a subclass decodes them."""
        return entry.payloads[kept]

    def add(self, entry, first: int, stop: int) -> None:
        """The entry's messages ``first`` to ``stop`` (exclusive)."""
        kept = slice(first, stop)
        self.values += self.entry_values(entry, kept)
        self.keys += [key or None for key in entry.partition_keys()[kept]]
        self.ids += entry.serialized_message_ids()[kept]
        self.publish_times += [entry.metadata.publish_time * 1000] * (stop - first)
        self.event_times += [ms * 1000 or None for ms in entry.event_timestamps()[kept]]
        self.properties += entry.properties()[kept]
