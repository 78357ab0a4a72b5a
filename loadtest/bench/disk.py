"""The disk's own limits, measured in the same run as the system under test.

Writes fixed-size blocks to a file in the given directory and fdatasyncs after
each one, as a journal with one record per fsync would: the bandwidth this
achieves is the physical ceiling for fsync'd appends; the latency is the floor
for an acknowledged add.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from loadtest.bench.report import latency_summary_ms


def fsync_bandwidth(directory: str | Path, block_bytes: int, duration_s: float = 2.0) -> dict:
    """Append ``block_bytes`` blocks with fdatasync each for ~duration_s seconds."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    block = os.urandom(block_bytes)
    latencies = []
    fd, name = tempfile.mkstemp(prefix="fsync-probe-", dir=directory)
    try:
        written = 0
        start = time.perf_counter()
        deadline = start + duration_s
        while True:
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            t1 = time.perf_counter()
            latencies.append(t1 - t0)
            written += block_bytes
            if t1 >= deadline:
                break
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(name)
    return {
        "block_bytes": block_bytes,
        "mb_per_s": written / elapsed / 1e6,
        "fsyncs_per_s": len(latencies) / elapsed,
        **{f"fsync_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"},
    }
