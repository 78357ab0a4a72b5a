"""Keep large freed buffers in the process instead of handing them back to the kernel at once.

Why: glibc serves an allocation above its mmap threshold (128 KiB at start, then raised dynamically, but per
arena and never past a freed chunk's size) with a fresh mmap and unmaps it on free. Each 5 MiB message the broker
and the bookies handle is copied a few times (socket buffer, frame, packaged entry, journal record), and every
copy into fresh pages costs 1,280 page faults. Measured on the 2-core development VM: two 5 MiB copies took
5-12 ms in fresh pages, 0.2-0.5 ms in reused ones -- most of the broker's CPU per 5 MiB message, spent on the
event loop every other client shares. Pulsar and BookKeeper avoid the same cost with Netty's pooled allocator.

``keep_large_buffers()`` raises the mmap threshold above the largest frame (so such buffers come from the heap
and are reused after free) and sets a trim threshold, so up to that much freed memory stays mapped. Called once at
the start of every server process (``broker``, ``bookie``, the standalone's workers). Only glibc has ``mallopt``;
elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Above the largest frame either protocol accepts (8 MiB by default) and within glibc's cap (32 MiB on 64-bit).
MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
# Freed memory kept at the top of the heap before it is returned: a bound on what this costs in RSS.
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_large_buffers(mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Tune glibc malloc as described above; True if it took effect."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    if not ok:
        log.warning("mallopt refused mmap threshold %d / trim threshold %d", mmap_threshold, trim_threshold)
    return ok
