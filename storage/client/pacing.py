"""Large adds are paced while small adds are flowing, so a writer of megabyte entries does not stall everyone
else's small ones.

Why: a 5 MiB add sent at full speed keeps the writer's event loop, both bookies' event loops and the kernel's
loopback path busy at once for about 10 ms (20 slices of 256 KiB to each of two bookies). On a machine with
fewer cores than busy processes, a small add that arrives then waits for a CPU at every hop: on the development
VM the small adds that overlapped a 5 MiB one had a p99 of 12.6 ms, the others 2.6 ms (docs/hostile-clients.md).
Spread over 40 ms, the same bytes leave gaps the small adds go through.

How: after each slice it sends, a connection for large adds (``BookiePool``'s second connection per bookie)
waits ``slice bytes / bulk_add_pace_bytes_per_s`` before the next one, but only while a small add was sent within
the last ``SMALL_ADDS_ACTIVE_S``, by this client or by any process sharing its ``SmallAddBeacon`` (the
standalone's broker workers share one: they share the bookies and the cores). Alone, large adds go at full
speed. Nothing is reordered. The pace spreads bursts and never builds a queue: while more than
``MAX_PACED_BACKLOG_S`` of bytes at the pace wait to be sent, the connection sends at full speed, so pacing
delays an add by about a second at most, far inside ``add_entry_timeout_s``.

The default pace, 64 MiB/s to each bookie, is just under what the development VM's one disk takes of two
bookies' journal and entry-log writes (314 MB/s / 4); on a bookie with disks of its own it does bind a
large-message writer while small adds flow through the same client. 0 turns it off.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from typing import Callable

# A small add sent this recently means someone small is waiting behind the large ones.
SMALL_ADDS_ACTIVE_S = 1.0
# How often a process writes the shared beacon at most: its small adds are many, the beacon needs one a window.
BEACON_WRITE_INTERVAL_S = 0.05
# Beyond this many seconds' worth of bytes (at the pace) waiting to be sent, large adds are not paced.
MAX_PACED_BACKLOG_S = 1.0
_STAMP = struct.Struct("d")


class SmallAddBeacon:
    """When any of the processes sharing ``path`` last sent a small add: one CLOCK_MONOTONIC stamp (one clock for
    the whole machine) in a shared memory map of the file. A write or read is an 8-byte copy; a torn one could
    only misjudge one pause."""

    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _STAMP.size:
                os.ftruncate(fd, _STAMP.size)
            self._map = mmap.mmap(fd, _STAMP.size)
        finally:
            os.close(fd)

    def mark(self, at: float) -> None:
        _STAMP.pack_into(self._map, 0, at)

    def last(self) -> float:
        return _STAMP.unpack_from(self._map, 0)[0]


class BulkPacer:
    def __init__(self, bytes_per_s: int, clock: Callable[[], float] = time.monotonic,
                 beacon: SmallAddBeacon | None = None):
        self.bytes_per_s = bytes_per_s  # 0 = never pace
        self._clock = clock
        self._beacon = beacon
        self._small_at = float("-inf")
        self._beacon_at = float("-inf")  # when this process last wrote the beacon
        self.paced_s = 0.0  # total time large adds waited for the pace (a metric)

    def small_add(self) -> None:
        now = self._small_at = self._clock()
        if self._beacon is not None and now - self._beacon_at >= BEACON_WRITE_INTERVAL_S:
            self._beacon_at = now
            self._beacon.mark(now)

    def _last_small_add(self) -> float:
        return self._small_at if self._beacon is None else max(self._small_at, self._beacon.last())

    def active(self) -> bool:
        """Large adds are to be paced now: a pace is set and a small add was sent within the window."""
        if not self.bytes_per_s:
            return False
        # A stamp more than a window ahead of the clock is a beacon file left by an earlier boot: not a small add.
        return -SMALL_ADDS_ACTIVE_S <= self._clock() - self._last_small_add() <= SMALL_ADDS_ACTIVE_S

    def gap_s(self, sent_bytes: int, backlog_bytes: int = 0) -> float:
        """How long a connection for large adds waits after sending ``sent_bytes`` before it sends more, with
        ``backlog_bytes`` still waiting to be sent."""
        if sent_bytes <= 0 or backlog_bytes > self.bytes_per_s * MAX_PACED_BACKLOG_S or not self.active():
            return 0.0
        gap = sent_bytes / self.bytes_per_s
        self.paced_s += gap
        return gap
