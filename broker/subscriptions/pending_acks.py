"""What one consumer was sent and has not acknowledged yet (Pulsar's per-consumer ``pendingAcks``).

Each pending entry remembers its batch size, its sticky-key hash and which of
its batch indexes were acknowledged one by one. ``unacked_messages`` counts
messages, not entries -- the sum of batch sizes minus the batch indexes
already acknowledged -- which is what the unacked limits count. An entry sent
with some indexes already acknowledged (a partly acked batch redelivered)
counts only the rest. When the consumer leaves, ``release_all`` hands the
positions back for redelivery to the others.
"""

from __future__ import annotations

import bisect
from typing import Iterable, NamedTuple

Position = tuple  # (ledger_id, entry_id); any 2-tuple


def _key(position) -> tuple:
    """The dict key of ``position``: any tuple hashes and compares as the plain one (a Position is a NamedTuple),
    so only a list is copied: an ACK looks each of its ids up here, twice, and the copies showed in its profile."""
    return position if isinstance(position, tuple) else tuple(position)


class PendingAck(NamedTuple):
    batch_size: int
    key_hash: int
    acked_indexes: frozenset[int]

    @property
    def unacked(self) -> int:
        return self.batch_size - len(self.acked_indexes)


class PendingAcks:
    def __init__(self) -> None:
        self._positions: list[Position] = []  # sorted, for cumulative acks
        self._entries: dict[Position, list] = {}  # position -> [batch_size, key_hash, acked indexes]
        self._unacked = 0

    @property
    def unacked_messages(self) -> int:
        return self._unacked

    def add(self, position, batch_size: int, key_hash: int = 0, acked_indexes: Iterable[int] = ()) -> bool:
        """Remember a dispatched entry; False (nothing changes) when it is already pending."""
        key = tuple(position)
        if key in self._entries:
            return False
        batch_size = max(int(batch_size), 1)
        acked = {i for i in acked_indexes if 0 <= i < batch_size}
        self._entries[key] = [batch_size, key_hash, acked]
        bisect.insort(self._positions, key)
        self._unacked += batch_size - len(acked)
        return True

    def remove(self, position) -> bool:
        """The whole entry was acknowledged; False when it was not pending here."""
        key = tuple(position)
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        del self._positions[bisect.bisect_left(self._positions, key)]
        self._unacked -= entry[0] - len(entry[2])
        return True

    def remove_up_to(self, position) -> list[Position]:
        """Cumulative ack: drop every pending position <= ``position``; returns them in order."""
        i = bisect.bisect_right(self._positions, tuple(position))
        gone, self._positions = self._positions[:i], self._positions[i:]
        for key in gone:
            entry = self._entries.pop(key)
            self._unacked -= entry[0] - len(entry[2])
        return gone

    def ack_batch_indexes(self, position, indexes: Iterable[int]) -> bool:
        """Acknowledge single messages of a batch; True when that completed the entry (it is then removed)."""
        entry = self._entries.get(tuple(position))
        if entry is None:
            return False
        fresh = {i for i in indexes if 0 <= i < entry[0]} - entry[2]
        entry[2] |= fresh
        self._unacked -= len(fresh)
        if len(entry[2]) >= entry[0]:
            self.remove(position)
            return True
        return False

    def release(self, positions: Iterable) -> list[Position]:
        """Give up the given positions (for redelivery); returns those that were pending here, in order."""
        return sorted(tuple(p) for p in positions if self.remove(p))

    def release_all(self) -> list[Position]:
        """The consumer left: every pending position, in order, for redelivery to the others."""
        out = self._positions
        self._positions = []
        self._entries.clear()
        self._unacked = 0
        return out

    def get(self, position) -> PendingAck | None:
        entry = self._entries.get(tuple(position))
        return None if entry is None else PendingAck(entry[0], entry[1], frozenset(entry[2]))

    def batch_size(self, position) -> int | None:
        entry = self._entries.get(_key(position))
        return None if entry is None else entry[0]

    def key_hash(self, position) -> int | None:
        entry = self._entries.get(tuple(position))
        return None if entry is None else entry[1]

    def positions(self) -> list[Position]:
        return list(self._positions)

    def __contains__(self, position) -> bool:
        return _key(position) in self._entries

    def __len__(self) -> int:
        return len(self._entries)
