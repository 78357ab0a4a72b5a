"""Counting histograms for a managed ledger's add latency and entry size, with Pulsar's bucket bounds.

Counts are cumulative since the managed ledger opened; the broker's stats
window (broker/stats_window.py) turns them into "during the last minute"
figures, as Pulsar reports them. Bounds are inclusive upper limits; one more
bucket holds everything above the last bound (Pulsar's ``_OVERFLOW``).
"""

from __future__ import annotations

import bisect

# Pulsar's StatsBuckets boundaries: add (storage write) latency in milliseconds, entry size in bytes.
ADD_LATENCY_BOUNDS_MS = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
ENTRY_SIZE_BOUNDS_BYTES = (128, 512, 1024, 2048, 4096, 16384, 102400, 1048576)


class Buckets:
    """Observations counted into ``bounds`` (inclusive upper limits) plus an overflow bucket; sum and count kept."""

    def __init__(self, bounds: tuple[float, ...]):
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bucket bounds must be strictly increasing, got {bounds!r}")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def snapshot(self) -> tuple[float, ...]:
        """Every bucket's count, then the sum and the count: one vector, so a window can subtract two of them."""
        return (*self.counts, self.sum, self.count)


class ManagedLedgerMeters:
    """What a managed ledger measures on its add and read paths (the rest of its stats are counters in ``stats``)."""

    def __init__(self):
        self.add_latency_ms = Buckets(ADD_LATENCY_BOUNDS_MS)
        self.entry_size = Buckets(ENTRY_SIZE_BOUNDS_BYTES)
        self.add_errors = 0
        self.cache_hit_bytes = 0
        self.cache_miss_bytes = 0

    def added(self, latency_ms: float, size: int) -> None:
        self.add_latency_ms.observe(latency_ms)
        self.entry_size.observe(size)
