"""What a consumer was sent and has not acknowledged yet.

Each pending entry remembers its batch size, its sticky-key hash and which of
its batch indexes were acknowledged one by one; ``unacked_messages`` counts
messages (not entries), which is what Pulsar's unacked limits count.
"""

from __future__ import annotations


class PendingAcks:
    def __init__(self) -> None:
        self._entries: dict[tuple, list] = {}  # position -> [batch_size, key_hash, acked indexes]
        self.unacked_messages = 0

    def add(self, position, batch_size: int, key_hash: int = 0) -> None:
        key = tuple(position)
        if key in self._entries:
            return
        self._entries[key] = [batch_size, key_hash, set()]
        self.unacked_messages += batch_size

    def remove(self, position) -> bool:
        entry = self._entries.pop(tuple(position), None)
        if entry is None:
            return False
        self.unacked_messages -= entry[0] - len(entry[2])
        return True

    def remove_up_to(self, position) -> list[tuple]:
        """Cumulative ack: drop every pending position <= ``position``; returns them."""
        limit = tuple(position)
        gone = [k for k in self._entries if k <= limit]
        for k in gone:
            self.remove(k)
        return gone

    def ack_batch_indexes(self, position, indexes) -> None:
        entry = self._entries.get(tuple(position))
        if entry is None:
            return
        fresh = {i for i in indexes if 0 <= i < entry[0]} - entry[2]
        entry[2] |= fresh
        self.unacked_messages -= len(fresh)
        if len(entry[2]) >= entry[0]:
            self.remove(position)

    def release(self, positions) -> list[tuple]:
        """Give up the given positions (for redelivery); returns those that were pending here."""
        out = []
        for p in positions:
            if self.remove(p):
                out.append(tuple(p))
        return sorted(out)

    def release_all(self) -> list[tuple]:
        out = sorted(self._entries)
        self._entries.clear()
        self.unacked_messages = 0
        return out

    def batch_size(self, position) -> int | None:
        entry = self._entries.get(tuple(position))
        return None if entry is None else entry[0]

    def key_hash(self, position) -> int | None:
        entry = self._entries.get(tuple(position))
        return None if entry is None else entry[1]

    def __contains__(self, position) -> bool:
        return tuple(position) in self._entries

    def __len__(self) -> int:
        return len(self._entries)
