"""Key_Shared: which consumer owns a key, and when a newly joined consumer may receive it.

Keys hash into 0..65535 (Pulsar's range): MurmurHash3 x86_32 of the key's
bytes (the ordering key if set, else the partition key), masked to 31 bits,
modulo 65536. Two selectors map hashes to consumers:

- ``ConsistentHashingSelector`` (AUTO_SPLIT, the default): each consumer sits
  on a ring at ``points_per_consumer`` points (the hash of its name plus a
  counter); a key belongs to the first point at or after its hash. Adding or
  removing a consumer moves only the keys next to its points.
- ``StickyRangesSelector`` (STICKY): consumers declare inclusive hash ranges;
  overlapping ranges are refused.

Ordering when a consumer joins: keys that move to it may still have
unacknowledged messages on their previous consumer. So a consumer that joins
while messages are out may only receive entries *before* the read position
at its arrival until the mark-delete position passes that point
(``RecentlyJoined``), as Pulsar's "recently joined consumers" rule.
"""

from __future__ import annotations

import bisect
import struct

from broker.errors import ConsumerAssignError

HASH_RANGE = 65536


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32, unsigned."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    n = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: n * 4]):
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[n * 4:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


def sticky_key_hash(key: bytes) -> int:
    return (murmur3_32(key) & 0x7FFFFFFF) % HASH_RANGE


class ConsistentHashingSelector:
    def __init__(self, points_per_consumer: int = 100):
        self.points_per_consumer = points_per_consumer
        self._points: list[int] = []  # sorted hashes
        self._owners: dict[int, list] = {}  # hash -> consumers at that point (collisions: the first wins)

    def add_consumer(self, consumer) -> None:
        for i in range(self.points_per_consumer):
            h = sticky_key_hash(f"{consumer.name}{i}".encode())
            owners = self._owners.setdefault(h, [])
            if not owners:
                bisect.insort(self._points, h)
            owners.append(consumer)

    def remove_consumer(self, consumer) -> None:
        for h in [h for h, owners in self._owners.items() if consumer in owners]:
            owners = self._owners[h]
            owners.remove(consumer)
            if not owners:
                del self._owners[h]
                self._points.remove(h)

    def select(self, key_hash: int):
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, key_hash)
        return self._owners[self._points[i % len(self._points)]][0]

    def consumer_ranges(self) -> dict:
        """consumer -> list of inclusive (start, end) hash ranges it owns (for stats)."""
        out: dict = {}
        prev = -1
        for h in self._points:
            out.setdefault(self._owners[h][0], []).append((prev + 1, h))
            prev = h
        if self._points and prev < HASH_RANGE - 1:
            out.setdefault(self._owners[self._points[0]][0], []).append((prev + 1, HASH_RANGE - 1))
        return out


class StickyRangesSelector:
    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, object]] = []  # sorted by start

    def add_consumer(self, consumer, ranges) -> None:
        """Raises ConsumerAssignError for an empty, inverted, out-of-range or overlapping range."""
        ranges = list(ranges)
        if not ranges:
            raise ConsumerAssignError("a STICKY Key_Shared consumer must declare at least one hash range")
        for start, end in ranges:
            if not 0 <= start <= end < HASH_RANGE:
                raise ConsumerAssignError(f"hash range [{start}, {end}] is not within 0..{HASH_RANGE - 1}")
            for s, e, owner in self._ranges + [(s2, e2, consumer) for s2, e2 in ranges if (s2, e2) != (start, end)]:
                if start <= e and s <= end:
                    raise ConsumerAssignError(f"hash range [{start}, {end}] overlaps [{s}, {e}] of consumer {owner.name!r}")
        for start, end in ranges:
            bisect.insort(self._ranges, (start, end, consumer), key=lambda r: r[0])

    def remove_consumer(self, consumer) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, key_hash: int):
        i = bisect.bisect_right([r[0] for r in self._ranges], key_hash) - 1
        if i >= 0 and self._ranges[i][0] <= key_hash <= self._ranges[i][1]:
            return self._ranges[i][2]
        return None


class RecentlyJoined:
    """Consumers that joined while messages were out, and the read position at their arrival."""

    def __init__(self) -> None:
        self._joined: dict[int, tuple] = {}  # id(consumer) -> read position when it joined

    def add(self, consumer, read_position) -> None:
        self._joined[id(consumer)] = tuple(read_position)

    def remove(self, consumer) -> None:
        self._joined.pop(id(consumer), None)

    def allowed(self, consumer, position, mark_delete_position) -> bool:
        limit = self._joined.get(id(consumer))
        if limit is None or tuple(mark_delete_position) >= _before(limit):
            return True
        return tuple(position) < limit

    def prune(self, mark_delete_position) -> None:
        md = tuple(mark_delete_position)
        for key in [k for k, limit in self._joined.items() if md >= _before(limit)]:
            del self._joined[key]

    def __len__(self) -> int:
        return len(self._joined)


def _before(position: tuple) -> tuple:
    """The position just before ``position`` within its ledger (entries before it are all acked when md reaches it)."""
    return (position[0], position[1] - 1)
