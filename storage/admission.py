"""A bound on adds in flight (entries and bytes), admitted in arrival order.

How it works: ``try_admit(n)`` reserves room for an add of ``n`` bytes at once, or refuses; ``admit(n)`` waits
for room instead. Waiters are served strictly first come, first served, and nobody overtakes them: while anyone
waits -- or has been woken and not yet run -- ``try_admit`` refuses, so an add that arrives later cannot slip
into room freed for an earlier one. (Adds of one producer start in order; a later one starting first would
reorder the log.) ``release(n)`` gives room back, when the add is answered whichever way.

One add is always admitted when nothing is held, so an add larger than the byte bound still goes, alone.
"""

from __future__ import annotations

import asyncio
from collections import deque


class AddAdmission:
    def __init__(self, max_entries: int, max_bytes: int):
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries = 0
        self.bytes = 0
        self._waiters: deque[tuple[asyncio.Future, int]] = deque()
        self._woken = 0  # admitted waiters that have not resumed yet

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, n: int) -> bool:
        if self.entries == 0:
            return True
        return self.entries < self.max_entries and self.bytes + n <= self.max_bytes

    def _reserve(self, n: int) -> None:
        self.entries += 1
        self.bytes += n

    def try_admit(self, n: int) -> bool:
        """Reserve room for one add of ``n`` bytes now, if nobody is ahead and it fits."""
        if self._waiters or self._woken or not self._fits(n):
            return False
        self._reserve(n)
        return True

    async def admit(self, n: int) -> None:
        """Wait for room, in turn. Cancelled, it takes no room."""
        if self.try_admit(n):
            return
        fut = asyncio.get_running_loop().create_future()
        entry = (fut, n)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # admitted, then cancelled before it ran: give the room back
                self._woken -= 1
                self.release(n)
            else:
                self._waiters.remove(entry)
                self._wake()
            raise
        self._woken -= 1
        self._wake()  # those behind it, if room remains

    def release(self, n: int) -> None:
        self.entries -= 1
        self.bytes -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][1]):
            fut, n = self._waiters.popleft()
            self._reserve(n)
            self._woken += 1
            fut.set_result(None)
