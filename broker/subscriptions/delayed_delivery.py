"""Messages held back until their ``deliver_at_time`` (Pulsar's ``InMemoryDelayedDeliveryTracker``).

Applies to Shared and Key_Shared subscriptions only, as in Pulsar: an
Exclusive or Failover consumer gets every message in order, immediately,
whatever its ``deliver_at_time`` (see ``delayed_delivery_applies``).

How it works: when the dispatcher reads an entry whose deliver-at time is
still ahead it hands the position here instead of to a consumer. When the
time comes, ``due()`` returns the positions, lowest first, and the dispatcher
puts them in its replay queue. The tracker is in memory; held messages are
unacknowledged, so after a broker restart the cursor reads them again and
they are held again (tests/official_client/test_delayed_delivery.py checks
this across a kill -9). Time comes from the injected ``clock`` (milliseconds).

``tick_ms`` is Pulsar's ``delayedDeliveryTickTimeMillis`` with
``delayedDeliveryDeliverAtTimeStrict=false``: a message due within one tick
counts as due now, which spares a round trip through the tracker. The
default 0 is the strict behaviour (never early).
"""

from __future__ import annotations

import heapq
import time
from typing import Callable

from broker.subscriptions import SubscriptionType

Position = tuple  # (ledger_id, entry_id); any 2-tuple


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def delayed_delivery_applies(sub_type: SubscriptionType) -> bool:
    """Pulsar delays messages only on subscriptions where consumers share the topic."""
    return sub_type in (SubscriptionType.Shared, SubscriptionType.Key_Shared)


class DelayedDeliveryTracker:
    def __init__(self, clock: Callable[[], int] = wall_clock_ms, tick_ms: int = 0):
        if tick_ms < 0:
            raise ValueError("tick_ms must be >= 0")
        self.clock = clock
        self.tick_ms = tick_ms
        self._heap: list[tuple[int, Position]] = []  # (deliver_at_ms, position)
        self._positions: set[Position] = set()

    def _cutoff(self, now_ms: int | None = None) -> int:
        return (self.clock() if now_ms is None else now_ms) + self.tick_ms

    def add(self, position, deliver_at_ms: int) -> bool:
        """Hold ``position`` until ``deliver_at_ms``; False (not held: deliver it now) when that time has come.

        A position already held keeps its first deliver-at time.
        """
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
            return False
        key = tuple(position)
        if key not in self._positions:
            heapq.heappush(self._heap, (deliver_at_ms, key))
            self._positions.add(key)
        return True

    def has_due(self, now_ms: int | None = None) -> bool:
        return bool(self._heap) and self._heap[0][0] <= self._cutoff(now_ms)

    def due(self, now_ms: int | None = None, limit: int | None = None) -> list[Position]:
        """Pop the positions whose time has come, returned in position order.

        With ``limit``, at most that many, those with the earliest deadlines first.
        """
        cutoff = self._cutoff(now_ms)
        out = []
        while self._heap and self._heap[0][0] <= cutoff and (limit is None or len(out) < limit):
            _, key = heapq.heappop(self._heap)
            self._positions.discard(key)
            out.append(key)
        out.sort()
        return out

    def next_delivery_ms(self) -> int | None:
        """When the earliest held message is due; None when nothing is held."""
        return self._heap[0][0] if self._heap else None

    def contains(self, position) -> bool:
        return tuple(position) in self._positions

    __contains__ = contains

    def clear(self) -> None:
        self._heap.clear()
        self._positions.clear()

    def __len__(self) -> int:
        return len(self._positions)
