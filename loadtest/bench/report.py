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


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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
