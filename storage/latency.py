"""Latency percentiles, shared by `bookie shell simpletest` and the benchmark suite."""

from __future__ import annotations

import math
import statistics


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted samples; nan when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[rank]


def summary_ms(samples_s: list[float]) -> dict:
    """count, p50/p99/p99.9/max/mean in milliseconds from samples in seconds."""
    ms = [s * 1000.0 for s in samples_s]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "p999_ms": percentile(ms, 99.9),
        "max_ms": max(ms) if ms else float("nan"),
        "mean_ms": statistics.fmean(ms) if ms else float("nan"),
    }
