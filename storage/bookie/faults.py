"""Scripted faults for a bookie's journal (STYLE.md 7): hold the next fsync until the test lets it go.

    faults = JournalFaults()
    service = await BookieService.start(config, fsync=faults)   # or Bookie.open(..., fsync=faults)
    hold = faults.hold_next_fsync()
    ...                         # an add reaches the journal; its group is written, not yet synced
    await hold.reached          # the writer thread is parked inside fsync
    ...                         # do what must happen "meanwhile"
    hold.release()              # the fsync runs (or hold.fail(OSError(...)))

The journal calls fsync from its writer thread, so the hold parks that
thread on a ``threading.Event`` and reports back to the loop with
``call_soon_threadsafe``. With no hold armed it is a plain ``os.fdatasync``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Callable

# A test that forgets to release must not wedge the writer thread forever:
# the fsync then fails, which fails the journal loudly.
_MAX_HOLD_S = 60.0


class FsyncHold:
    """One parked fsync: ``reached`` resolves (on the loop) once the writer is inside it."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.reached: asyncio.Future = loop.create_future()
        self._gate = threading.Event()
        self._error: OSError | None = None

    def release(self) -> None:
        self._gate.set()

    def fail(self, exc: OSError) -> None:
        self._error = exc
        self._gate.set()

    def _park(self) -> None:
        """Writer thread."""
        self._loop.call_soon_threadsafe(_resolve, self.reached)
        if not self._gate.wait(_MAX_HOLD_S):
            raise OSError(f"scripted fsync hold never released within {_MAX_HOLD_S}s")
        if self._error is not None:
            raise self._error


class JournalFaults:
    """An ``fsync`` callable for ``Journal``/``Bookie.open``/``BookieService.start`` with scripted holds."""

    def __init__(self, real_fsync: Callable[[int], None] = os.fdatasync):
        self._real = real_fsync
        self._lock = threading.Lock()
        self._holds: list[FsyncHold] = []
        self.fsyncs = 0

    def hold_next_fsync(self) -> FsyncHold:
        """Park the next journal fsync (must be called on the bookie's event loop)."""
        hold = FsyncHold(asyncio.get_running_loop())
        with self._lock:
            self._holds.append(hold)
        return hold

    def __call__(self, fd: int) -> None:
        with self._lock:
            hold = self._holds.pop(0) if self._holds else None
            self.fsyncs += 1
        if hold is not None:
            hold._park()
        self._real(fd)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
