"""Redelivery bookkeeping: how often each position was redelivered, and which wait to be sent again.

Counts are in memory, as in Pulsar (a broker restart starts them at zero).
The replay queue hands positions out in position order, so redelivered
messages keep their relative order.
"""

from __future__ import annotations

import bisect


class RedeliveryTracker:
    def __init__(self) -> None:
        self._counts: dict[tuple, int] = {}

    def increment(self, position) -> int:
        key = tuple(position)
        self._counts[key] = self._counts.get(key, 0) + 1
        return self._counts[key]

    def count_for(self, position) -> int:
        return self._counts.get(tuple(position), 0)

    def remove(self, position) -> None:
        self._counts.pop(tuple(position), None)

    def remove_up_to(self, position) -> None:
        limit = tuple(position)
        for key in [k for k in self._counts if k <= limit]:
            del self._counts[key]

    def clear(self) -> None:
        self._counts.clear()

    def __len__(self) -> int:
        return len(self._counts)


class ReplayQueue:
    """A sorted set of positions waiting to be redelivered."""

    def __init__(self) -> None:
        self._positions: list[tuple] = []

    def add(self, position) -> None:
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        if i == len(self._positions) or self._positions[i] != key:
            self._positions.insert(i, key)

    def pop(self, n: int) -> list[tuple]:
        out, self._positions = self._positions[:n], self._positions[n:]
        return out

    def discard(self, position) -> None:
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        if i < len(self._positions) and self._positions[i] == key:
            del self._positions[i]

    def __contains__(self, position) -> bool:
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        return i < len(self._positions) and self._positions[i] == key

    def __len__(self) -> int:
        return len(self._positions)
