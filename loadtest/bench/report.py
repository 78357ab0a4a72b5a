"""Benchmark results: one printed table and one JSON document per run.

A result row is a dict with at least ``name`` and ``value``/``unit``; rows
that compare against a reference carry ``reference`` and ``ratio`` so the
reader never has to trust an absolute number measured on a noisy machine.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from storage.latency import percentile, summary_ms as latency_summary_ms  # noqa: F401 (re-exported)

CDF_POINTS = [*range(0, 100, 2), 99, 99.5, 99.9, 99.99, 100]


def cdf_ms(samples_s: list[float]) -> list[list[float]]:
    """[percentile, milliseconds] pairs: enough of the distribution to draw its CDF, small enough for JSON."""
    if not samples_s:
        return []
    ordered = sorted(samples_s)
    return [[q, percentile(ordered, q) * 1000.0] for q in CDF_POINTS]


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": _proc_field("/proc/cpuinfo", "model name"),
        "memory_gib": _memory_gib(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _proc_field(path: str, name: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return None


def _memory_gib() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")  # "24675432 kB"
    return int(total.split()[0]) / 1024 / 1024 if total else None


def print_table(title: str, rows: list[dict], columns: list[str]) -> None:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    print(f"\n== {title} ==")
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def write_json(path: str | Path, suite: str, results: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"suite": suite, "machine": machine(), "results": results}, indent=2, default=str))
    return path
