"""Message deduplication by producer name and sequence id, surviving broker restarts.

How it works (Pulsar's MessageDeduplication): for each producer name the topic
remembers the highest sequence id *pushed* (handed to storage) and the highest
*persisted* (acknowledged by the bookies). A message whose sequence id is not
above the pushed one is a duplicate: if it is also not above the persisted one
the producer gets a receipt without a new write; if it is still in flight the
outcome is unknown and the producer gets a retriable error.

The state is made durable without a write per message: every
``snapshot_interval`` entries the table is stored as the properties of the
mark-delete of a dedicated cursor, ``pulsar.dedup``, at the entry it covers.
After a restart the table is restored from that snapshot and the entries
after it are replayed, reading each entry's producer name and sequence id.
"""

from __future__ import annotations

import enum
import logging

from magnetar.protocol.frames import parse_headers_and_payload

log = logging.getLogger(__name__)

CURSOR_NAME = "pulsar.dedup"


class DupStatus(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"  # persisted before: acknowledge without writing
    UNKNOWN = "unknown"  # an earlier copy is still in flight: ask the producer to retry


class Deduplication:
    def __init__(self, snapshot_interval: int = 1000):
        self.snapshot_interval = snapshot_interval
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self._cursor = None
        self._since_snapshot = 0

    @property
    def enabled(self) -> bool:
        return self._cursor is not None

    async def enable(self, ml) -> None:
        """Open (or restore) the dedup cursor and rebuild the table from its snapshot plus the entries after it."""
        from storage.managed_ledger import InitialPosition

        cursor = await ml.open_cursor(CURSOR_NAME, initial_position=InitialPosition.EARLIEST)
        self.persisted = {name: int(seq) for name, seq in (cursor.properties or {}).items()}
        replayed = 0
        reader = ml.new_non_durable_cursor(start=cursor.mark_delete_position, inclusive=False)
        try:
            while entries := await reader.read_entries(500):
                for entry in entries:
                    self._replay(entry.data)
                    replayed += 1
        finally:
            await reader.close()
        self.pushed = dict(self.persisted)
        self._cursor = cursor
        log.info("dedup on %s: %d producers restored, %d entries replayed", ml.name, len(self.persisted), replayed)

    async def disable(self, ml) -> None:
        if self._cursor is not None:
            self._cursor = None
            await ml.delete_cursor(CURSOR_NAME)
        self.pushed.clear()
        self.persisted.clear()

    def _replay(self, data: bytes) -> None:
        try:
            metadata, _, _ = parse_headers_and_payload(data)
        except Exception:  # a corrupt entry must not stop the topic from loading
            log.warning("dedup replay skipped an unreadable entry")
            return
        seq = metadata.highest_sequence_id if metadata.HasField("highest_sequence_id") else metadata.sequence_id
        if seq > self.persisted.get(metadata.producer_name, -1):
            self.persisted[metadata.producer_name] = seq

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DupStatus:
        """Classify a send and, when new, record it as pushed."""
        if not self.enabled:
            return DupStatus.NEW
        last_pushed = self.pushed.get(producer_name, -1)
        if sequence_id <= last_pushed:
            if highest_sequence_id > last_pushed:
                # A batch reaching past what was pushed is partly new: acknowledging it as a duplicate would drop
                # its new messages, so the producer is told to retry (Pulsar answers the same).
                return DupStatus.UNKNOWN
            return DupStatus.DUPLICATE if sequence_id <= self.persisted.get(producer_name, -1) else DupStatus.UNKNOWN
        self.pushed[producer_name] = max(sequence_id, highest_sequence_id)
        return DupStatus.NEW

    def forget_pushed(self, producer_name: str) -> None:
        """A write failed: what was pushed but not persisted may be sent again."""
        if producer_name in self.persisted:
            self.pushed[producer_name] = self.persisted[producer_name]
        else:
            self.pushed.pop(producer_name, None)

    async def persisted_at(self, producer_name: str, highest_sequence_id: int, position) -> None:
        if not self.enabled:
            return
        if highest_sequence_id > self.persisted.get(producer_name, -1):
            self.persisted[producer_name] = highest_sequence_id
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_interval:
            self._since_snapshot = 0
            await self.snapshot(position)

    async def snapshot(self, position) -> None:
        if self._cursor is not None and position is not None:
            await self._cursor.mark_delete(position, properties=dict(self.persisted))

    def last_sequence_id(self, producer_name: str) -> int:
        return self.persisted.get(producer_name, -1)
