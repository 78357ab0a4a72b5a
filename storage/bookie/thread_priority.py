"""A lower CPU priority for the bookie's background writers.

The threads that acknowledge adds -- the event loop and the main journal lane's writer -- keep the process's
priority. The large journal lane's writer and the storage thread (the write cache's flush to entry logs and the
index, checkpoints, compaction) run ``background_write_nice`` steps nicer, so when large entries keep the CPUs
busy the kernel runs the small adds' path first. Nothing waits on those threads to acknowledge a small add; a
large add waits on its own lane, and a full write cache already pushes back on adds (ledger_storage.py).

Linux keeps a nice value per thread (setpriority on a thread id); elsewhere it is per process, so there this
does nothing."""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

MAX_NICE = 19


def lower_this_thread(steps: int) -> int | None:
    """Make the calling thread ``steps`` nicer (capped at 19). Returns its new nice value, or None where nothing
    changed (steps 0, not Linux, or the kernel refused)."""
    if steps <= 0 or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        value = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, tid) + steps)
        os.setpriority(os.PRIO_PROCESS, tid, value)
    except OSError as exc:
        log.warning("could not lower the priority of thread %s by %d: %s", threading.current_thread().name, steps, exc)
        return None
    return value
