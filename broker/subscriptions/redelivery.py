"""Redelivery bookkeeping: how often each position was redelivered, and which positions wait to be sent again.

Counts are in memory, as in Pulsar's ``InMemoryRedeliveryTracker`` (a broker
restart starts them at zero); the count goes out with each MESSAGE so clients
can apply their dead-letter policy. The replay queue is a sorted set handing
positions out in position order, so redelivered messages keep their relative
order; for Key_Shared it also remembers each waiting position's key hash, so
newer entries of that key can wait behind it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Iterable

Position = tuple  # (ledger_id, entry_id); any 2-tuple


class RedeliveryTracker:
    """position -> number of times it was redelivered."""

    def __init__(self) -> None:
        self._counts: dict[Position, int] = {}

    def increment(self, position) -> int:
        """Count one more redelivery of ``position``; returns the new count."""
        key = tuple(position)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        return count

    def count_for(self, position) -> int:
        return self._counts.get(tuple(position), 0)

    def remove(self, position) -> None:
        """The position was acknowledged: forget it."""
        self._counts.pop(tuple(position), None)

    def remove_up_to(self, position) -> None:
        """A cumulative ack (or mark-delete move) up to and including ``position``."""
        limit = tuple(position)
        for key in [k for k in self._counts if k <= limit]:
            del self._counts[key]

    def clear(self) -> None:
        self._counts.clear()

    def __contains__(self, position) -> bool:
        return tuple(position) in self._counts

    def __len__(self) -> int:
        return len(self._counts)


class ReplayQueue:
    """A sorted set of positions waiting to be redelivered, with their key hashes when known."""

    def __init__(self) -> None:
        self._positions: list[Position] = []
        self._key_hash: dict[Position, int] = {}
        self._hash_counts: Counter[int] = Counter()

    def add(self, position, key_hash: int | None = None) -> bool:
        """Queue ``position``; False when it was already queued (a known key hash is kept or set)."""
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        fresh = i == len(self._positions) or self._positions[i] != key
        if fresh:
            self._positions.insert(i, key)
        if key_hash is not None and key not in self._key_hash:
            self._key_hash[key] = key_hash
            self._hash_counts[key_hash] += 1
        return fresh

    def add_many(self, positions: Iterable, key_hashes: Iterable[int | None] | None = None) -> int:
        """Queue several positions (optionally with their key hashes); returns how many were new."""
        positions = list(positions)
        hashes = list(key_hashes) if key_hashes is not None else [None] * len(positions)
        if len(hashes) != len(positions):
            raise ValueError("key_hashes must match positions one to one")
        return sum(self.add(p, h) for p, h in zip(positions, hashes))

    def _forget_hash(self, key: Position) -> None:
        h = self._key_hash.pop(key, None)
        if h is not None:
            self._hash_counts[h] -= 1
            if not self._hash_counts[h]:
                del self._hash_counts[h]

    def pop(self, n: int) -> list[Position]:
        """Take up to ``n`` positions, lowest first."""
        out, self._positions = self._positions[:n], self._positions[n:]
        for key in out:
            self._forget_hash(key)
        return out

    def peek(self, n: int) -> list[Position]:
        return self._positions[:n]

    def discard(self, position) -> bool:
        """The position was acknowledged (or is being sent otherwise): drop it; False when it was not queued."""
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        if i < len(self._positions) and self._positions[i] == key:
            del self._positions[i]
            self._forget_hash(key)
            return True
        return False

    def discard_up_to(self, position) -> list[Position]:
        """Drop every position <= ``position`` (the mark-delete moved past them); returns them."""
        i = bisect.bisect_right(self._positions, tuple(position))
        gone, self._positions = self._positions[:i], self._positions[i:]
        for key in gone:
            self._forget_hash(key)
        return gone

    def holds_key_hash(self, key_hash: int) -> bool:
        """Does an entry of this key wait here? (Then newer entries of the key must wait too.)"""
        return key_hash in self._hash_counts

    def key_hashes(self) -> set[int]:
        return set(self._hash_counts)

    def items(self):
        """(position, key hash or None when unknown), lowest position first."""
        return [(p, self._key_hash.get(p)) for p in self._positions]

    def earliest_by_key_hash(self) -> dict[int, Position]:
        """key hash -> the lowest waiting position of that key (newer entries of the key must wait behind it)."""
        out: dict[int, Position] = {}
        for p in self._positions:
            h = self._key_hash.get(p)
            if h is not None and h not in out:
                out[h] = p
        return out

    def clear(self) -> None:
        self._positions.clear()
        self._key_hash.clear()
        self._hash_counts.clear()

    def __contains__(self, position) -> bool:
        key = tuple(position)
        i = bisect.bisect_left(self._positions, key)
        return i < len(self._positions) and self._positions[i] == key

    def __iter__(self):
        return iter(list(self._positions))

    def __len__(self) -> int:
        return len(self._positions)
