"""Pulsar's managedLedgerMaxReadsInFlightSizeInMB: the bytes dispatchers have asked of storage and not yet handed
to consumers' connections, broker-wide.

Each dispatcher read brings up to dispatcherMaxReadSizeBytes into memory; a thousand subscriptions catching up at
once would bring a thousand of those. Over the bound, a read waits until others have been handed out. Once in a
connection, bytes are that connection's (it stops taking entries when its write buffer is full).
"""

from __future__ import annotations

import asyncio
from collections import deque


class ReadsInFlight:
    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes  # 0 = unlimited
        self.in_flight = 0
        self.waited = 0  # reads that had to wait, for metrics and tests
        self._waiters: deque[asyncio.Future] = deque()

    async def acquire(self, nbytes: int) -> int:
        """Wait until ``nbytes`` fit; returns what was taken (a read larger than the whole bound takes all of it
        and goes alone rather than never)."""
        if not self.limit_bytes:
            return 0
        nbytes = max(0, min(nbytes, self.limit_bytes))
        if self.in_flight + nbytes > self.limit_bytes:
            self.waited += 1
        while self.in_flight + nbytes > self.limit_bytes:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
        self.in_flight += nbytes
        return nbytes

    def release(self, nbytes: int) -> None:
        if not nbytes:
            return
        self.in_flight -= nbytes
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:  # each checks again; those that still do not fit queue anew
            if not waiter.done():
                waiter.set_result(None)
