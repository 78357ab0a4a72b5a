"""Recently added entries, kept so tailing readers never go to the bookies.

Bounded by bytes; the oldest entries go first, and entries every reader has
passed can be dropped early (``evict_before``). Hits and misses are counted
so tests and metrics can show that a reader that keeps up is served here.
"""

from __future__ import annotations

from collections import OrderedDict

from storage.managed_ledger.position import Position


class EntryCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self.size = 0
        self.evictions = 0  # entries pushed out to make room (not those every reader had passed)

    def insert(self, position: Position, data: bytes) -> None:
        if self.max_bytes <= 0 or len(data) > self.max_bytes or position in self._entries:
            return
        self._entries[position] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.size -= len(old)
            self.evictions += 1

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position)

    def evict_before(self, position: Position) -> None:
        while self._entries:
            first = next(iter(self._entries))
            if first >= position:
                return
            self.size -= len(self._entries.pop(first))

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries)
