"""Reading through the compacted view: the compacted ledger, and a cursor that reads it up to the horizon.

How it works: a subscription with ``read_compacted`` gets a ``CompactedCursor``
in place of its managed cursor. While the cursor's read position is at or
before the horizon, reads come from the compacted ledger: the first entry
whose original position is at or after the read position is found by binary
search (entries are in position order), and a cursor reading on continues
from where its last read ended without searching. Past the compacted entries
the read position jumps to just after the horizon, and reads come from the
topic as usual. Entries keep their original positions, so acknowledgements,
redelivery and seeks work on the managed cursor unchanged.

A cursor at the very start of what the topic still stores (a new reader
from the earliest message, or a subscription that consumed nothing yet)
reads the compacted view from its first entry: those entries may come from
ledgers trimmed since compaction.
"""

from __future__ import annotations

from broker.compaction import model
from storage.managed_ledger import Entry, Position


class CompactedLedgerReader:
    """A closed compacted ledger, read by position."""

    def __init__(self, handle):
        self.handle = handle
        self.ledger_id = handle.ledger_id
        self.entries = handle.last_add_confirmed + 1
        self._positions: dict[int, Position] = {}  # entry id -> original position, filled by searches

    @classmethod
    async def open(cls, ml, ledger_id: int) -> "CompactedLedgerReader":
        return cls(await ml.open_ledger(ledger_id, recovery=False))

    async def read(self, first: int, count: int) -> list[tuple[Position, bytes]]:
        last = min(self.entries - 1, first + count - 1)
        if first > last:
            return []
        out = []
        for e in await self.handle.read_entries(first, last):
            position, data = model.decode_compacted_entry(e.payload)
            self._positions[e.entry_id] = position
            out.append((position, data))
        return out

    async def _position_of(self, entry_id: int) -> Position:
        known = self._positions.get(entry_id)
        if known is None:
            known = (await self.read(entry_id, 1))[0][0]
        return known

    async def find(self, position: Position) -> int:
        """The index of the first entry whose original position is at or after ``position`` (``entries`` if none)."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._position_of(mid) < position:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def scan(self, batch: int = 100):
        for first in range(0, self.entries, batch):
            for item in await self.read(first, batch):
                yield item

    async def last_entry(self) -> tuple[Position, bytes] | None:
        if self.entries == 0:
            return None
        return (await self.read(self.entries - 1, 1))[0]

    async def close(self) -> None:
        await self.handle.close()


class CompactedCursor:
    """A managed cursor that reads the compacted view up to the horizon (everything else is the cursor's own)."""

    reads_compacted = True

    def __init__(self, cursor, compaction):
        self._cursor = cursor
        self._compaction = compaction
        self._resume: tuple[int, Position, int] | None = None  # (generation, read position, next index)
        self._done = False  # read through a view to its end; a rewind or seek starts over

    def is_deleted(self, position) -> bool:
        """A cursor that has consumed nothing has its mark-delete just before the first stored entry; the view's
        entries from trimmed ledgers lie before that and are not consumed for it."""
        cursor, c = self._cursor, self._compaction
        position = Position(*position)
        mark = cursor.mark_delete_position
        if (c.horizon is not None and position <= c.horizon and position <= mark and mark.entry_id == -1
                and mark == cursor.ml.position_before(cursor.ml.first_position)):
            return cursor.deleted.contains(position.ledger_id, position.entry_id)
        return cursor.is_deleted(position)

    def __getattr__(self, name):
        return getattr(self._cursor, name)

    @property
    def managed_cursor(self):
        return self._cursor

    def _in_view(self) -> bool:
        c = self._compaction
        if c.reader is None or c.horizon is None:
            return False
        position = self._cursor.read_position
        if position <= c.horizon:
            return True
        # At the start of what the topic still stores, the view comes first even when the ledgers it was made
        # from are trimmed (the read position is then past the horizon) -- once.
        return not self._done and position <= self._cursor.ml.first_position

    def rewind(self) -> None:
        self._done = False
        self._cursor.rewind()

    def seek(self, position) -> None:
        self._done = False
        self._cursor.seek(position)

    async def reset(self, position) -> None:
        self._done = False
        await self._cursor.reset(position)

    def has_more_entries(self) -> bool:
        return self._in_view() or self._cursor.has_more_entries()

    async def wait_for_entries(self) -> None:
        if not self._in_view():
            await self._cursor.wait_for_entries()

    async def read_entries(self, max_entries: int) -> list[Entry]:
        if max_entries <= 0 or not self._in_view():
            return await self._cursor.read_entries(max_entries)
        c, cursor = self._compaction, self._cursor
        reader, horizon, generation = c.reader, c.horizon, c.generation
        began_at = cursor.read_position
        resume = self._resume
        if resume is not None and resume[0] == generation and resume[1] == began_at:
            index = resume[2]
        else:
            start = Position(-1, -1) if began_at <= cursor.ml.first_position else began_at
            index = await reader.find(start)
        items = await reader.read(index, max_entries)
        if cursor.read_position != began_at or c.generation != generation:
            self._resume = None
            return []  # a seek, or a new compacted view, during the read: decide again
        if not items:
            cursor.read_position = max(Position(horizon.ledger_id, horizon.entry_id + 1), cursor.read_position)
            self._resume, self._done = None, True
            return await cursor.read_entries(max_entries)
        last = items[-1][0]
        cursor.read_position = Position(last.ledger_id, last.entry_id + 1)
        self._resume = (generation, cursor.read_position, index + len(items))
        return [Entry(position, data) for position, data in items]

    async def read_entries_or_wait(self, max_entries: int) -> list[Entry]:
        while True:
            entries = await self.read_entries(max_entries)
            if entries:
                return entries
            await self.wait_for_entries()


def read_compacted(subscription, compaction) -> None:
    """Make ``subscription`` read through the compacted view (its dispatcher too, if it has one)."""
    if getattr(subscription.cursor, "reads_compacted", False):
        return
    subscription.cursor = CompactedCursor(subscription.cursor, compaction)
    if subscription.dispatcher is not None:
        subscription.dispatcher.cursor = subscription.cursor


def plain_view(subscription) -> None:
    """Undo ``read_compacted``: the subscription reads its managed cursor again."""
    cursor = getattr(subscription.cursor, "managed_cursor", None)
    if cursor is None:
        return
    subscription.cursor = cursor
    if subscription.dispatcher is not None:
        subscription.dispatcher.cursor = cursor
