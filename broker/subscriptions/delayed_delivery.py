"""Messages held back until their ``deliver_at_time``.

Applies to Shared and Key_Shared subscriptions only, as in Pulsar: an
Exclusive or Failover consumer gets messages in order, immediately. The
tracker is in memory; held messages are unacknowledged, so after a broker
restart the cursor reads them again and they are tracked again. Time comes
from the injected ``clock`` (milliseconds).
"""

from __future__ import annotations

import heapq
import time


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class DelayedDeliveryTracker:
    def __init__(self, clock=wall_clock_ms):
        self.clock = clock
        self._heap: list[tuple[int, tuple]] = []
        self._positions: set[tuple] = set()

    def add(self, position, deliver_at_ms: int) -> bool:
        """Hold ``position`` until ``deliver_at_ms``; False (not held) when that time has already come."""
        key = tuple(position)
        if deliver_at_ms <= self.clock():
            return False
        if key not in self._positions:
            heapq.heappush(self._heap, (deliver_at_ms, key))
            self._positions.add(key)
        return True

    def due(self, now_ms: int | None = None) -> list[tuple]:
        """Pop every position whose time has come, in position order."""
        now = self.clock() if now_ms is None else now_ms
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, key = heapq.heappop(self._heap)
            if key in self._positions:
                self._positions.discard(key)
                out.append(key)
        return sorted(out)

    def next_delivery_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def contains(self, position) -> bool:
        return tuple(position) in self._positions

    def clear(self) -> None:
        self._heap.clear()
        self._positions.clear()

    def __len__(self) -> int:
        return len(self._positions)
