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

A bookie *process* started with ``MAGNETAR_FAULT_INJECTION=1`` in its
environment (the nemesis and real-process tests, never production) runs its
journal on a ``JournalFaults`` and serves ``PUT /api/v1/bookie/faults``
(http.py) to set ``fsync_delay_s`` (a slow disk) or ``fsync_errno`` (every
fsync fails, e.g. with ENOSPC, where no size-limited filesystem can be
mounted). Without that variable the journal calls ``os.fdatasync`` directly
and the route does not exist.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from typing import Callable

# A test that forgets to release must not wedge the writer thread forever:
# the fsync then fails, which fails the journal loudly.
_MAX_HOLD_S = 60.0
# Bounds for the process-level switches: a delay past this would only wedge the writer.
MAX_FSYNC_DELAY_S = 30.0
FAULT_INJECTION_ENV = "MAGNETAR_FAULT_INJECTION"


def fault_injection_enabled(environ=os.environ) -> bool:
    """Whether this bookie process was started in fault-injection mode (tests and the nemesis only)."""
    return environ.get(FAULT_INJECTION_ENV, "") not in ("", "0")


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
        self.fsync_delay_s = 0.0  # a slow disk: every fsync takes this much longer
        self.fsync_errno: int | None = None  # every fsync fails with this errno (e.g. errno.ENOSPC)

    def set_switches(self, fsync_delay_s: float, fsync_errno: int | None) -> None:
        """Set the slow-disk delay and the injected error. Raises ValueError outside the bounds."""
        if not 0 <= fsync_delay_s <= MAX_FSYNC_DELAY_S:
            raise ValueError(f"fsync delay must be in 0..{MAX_FSYNC_DELAY_S} s, got {fsync_delay_s}")
        if fsync_errno is not None and fsync_errno not in errno.errorcode:
            raise ValueError(f"unknown errno {fsync_errno}")
        self.fsync_delay_s, self.fsync_errno = fsync_delay_s, fsync_errno

    def switches(self) -> dict:
        return {"fsyncDelayMs": round(self.fsync_delay_s * 1000, 3),
                "fsyncError": errno.errorcode[self.fsync_errno] if self.fsync_errno is not None else None,
                "fsyncs": self.fsyncs}

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
        failing, delay = self.fsync_errno, self.fsync_delay_s
        if failing is not None:
            raise OSError(failing, f"{os.strerror(failing)} (injected by fault injection)")
        if delay:
            time.sleep(delay)  # the fault itself: this fsync is slow
        self._real(fd)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
