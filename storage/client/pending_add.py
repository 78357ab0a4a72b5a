"""Pending adds and the in-order acknowledgement rule (pure: no I/O, no event loop).

An add is acknowledged to the writer when Qa bookies of its write set have
acked it AND every earlier entry has been acknowledged (DESIGN invariant 1).
``AddQueue.ready()`` applies that rule: it releases the longest prefix of
entries that each hold Qa acks. While an ensemble change is in progress the
queue is *held*: acks are recorded but nothing is released, so the last
add confirmed cannot move past the first entry of the new fragment before the
new bookie has it (BookKeeper's ``changingEnsemble`` guard).

Acks are per ensemble *position*, tagged with the bookie the entry was sent
to, so a late ack from a bookie that has since been replaced at that position
is ignored rather than counted for its successor.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator


class PendingAdd:
    """One entry on its way to its write set."""

    __slots__ = ("entry_id", "body", "length", "positions", "sent_to", "acked", "future")

    def __init__(self, entry_id: int, body: bytes, length: int, positions: tuple[int, ...], future: Any = None):
        self.entry_id = entry_id
        self.body = body  # the packaged entry (storage.digest), re-sent verbatim after an ensemble change
        self.length = length  # ledger length including this entry
        self.positions = positions  # ensemble positions of the write set
        self.sent_to: dict[int, str] = {}  # position -> bookie the current copy went to
        self.acked: set[int] = set()  # positions that acknowledged
        self.future = future

    def sent(self, position: int, bookie_id: str) -> None:
        self.sent_to[position] = bookie_id
        self.acked.discard(position)

    def record_ack(self, position: int, bookie_id: str) -> bool:
        """Count an ack; False (ignored) when the position now belongs to another bookie."""
        if self.sent_to.get(position) != bookie_id:
            return False
        self.acked.add(position)
        return True

    def is_current(self, position: int, bookie_id: str) -> bool:
        return self.sent_to.get(position) == bookie_id

    def __repr__(self) -> str:
        return f"PendingAdd(entry={self.entry_id}, acked={sorted(self.acked)}, sent_to={self.sent_to})"


class AddQueue:
    """Pending adds in entry order, releasing them only in order and only with Qa acks."""

    def __init__(self, ack_quorum_size: int):
        self._ack_quorum = ack_quorum_size
        self._queue: deque[PendingAdd] = deque()
        self._held = 0

    def push(self, add: PendingAdd) -> None:
        if self._queue and add.entry_id != self._queue[-1].entry_id + 1:
            raise ValueError(f"entry {add.entry_id} pushed after {self._queue[-1].entry_id}: adds must be contiguous")
        self._queue.append(add)

    def hold(self) -> None:
        self._held += 1

    def release(self) -> None:
        if self._held == 0:
            raise RuntimeError("release() without hold()")
        self._held -= 1

    @property
    def held(self) -> bool:
        return self._held > 0

    def ready(self) -> list[PendingAdd]:
        """Pop and return the adds that complete now (in entry order)."""
        out = []
        if self._held:
            return out
        q = self._queue
        quorum = self._ack_quorum
        while q and len(q[0].acked) >= quorum:
            out.append(q.popleft())
        return out

    def drain(self) -> list[PendingAdd]:
        """Remove and return every pending add (the handle failed)."""
        out = list(self._queue)
        self._queue.clear()
        return out

    def __iter__(self) -> Iterator[PendingAdd]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)
