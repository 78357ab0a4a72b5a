"""The cells of docs/BENCHMARKS.md's tables: numbers, sizes, verdicts, a markdown table, a reproduce line."""

from __future__ import annotations

import math


def number(value, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def floor_pct(ratio: float) -> str:
    """A percentage rounded down, so a figure just under a target never prints as the target itself."""
    return f"{math.floor(ratio * 1000) / 10:.1f}%"


def size_text(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def reproduce(suite: str) -> str:
    return f"Reproduce: `python -m loadtest.bench {suite} [--quick]`."
