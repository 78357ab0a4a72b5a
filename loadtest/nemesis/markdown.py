"""The "Nemesis" section of docs/BENCHMARKS.md from one run's result (``python -m loadtest.nemesis --report docs/``).

The section is replaced in place (from its heading to the next ``## `` heading), so the rest of the page, which
``python -m loadtest.bench all --report`` writes, stays as it is; it is appended when the page has none. The other
way round, ``bench all --report`` carries the section over from the page it replaces (loadtest/bench/page.py),
because a nemesis run is long and separate from ``all``; ``--report-from RESULT`` renders it from a saved result.
"""

from __future__ import annotations

import math
from pathlib import Path

from loadtest.bench.page import NEMESIS_HEADING as HEADING, section_bounds
from loadtest.nemesis.checker import COUNTS, VIOLATIONS

LABELS = {
    "lost": "acknowledged, then lost", "phantom": "phantoms (read, never sent)",
    "failed_but_read": "definitely failed, yet read", "order": "per-producer order violations (final reads)",
    "fenced_read": "fenced writer's messages readable", "dedup_duplicates": "duplicates with dedup on",
    "ordered_delivery": "Exclusive/Failover order violations", "key_order": "Key_Shared per-key order violations",
    "subscription_missing": "acknowledged, never delivered to a subscription",
    "linearizable": "linearizable-topic violations", "duplicates": "duplicates (dedup off)",
    "acked_redelivered": "acknowledged by a consumer, then redelivered",
    "fenced_writes": "writes acknowledged by a fenced writer", "unknown_stored": "unknown sends that were stored",
    "unknown_absent": "unknown sends that were not",
}


def _s(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.2f}"


def section(result: dict) -> list[str]:
    f = result["findings"]
    ops = result["operations"]
    lines = [HEADING, "",
             f"`{result['replay']} --report docs/` (loadtest/nemesis, described in docs/nemesis.md): "
             f"{result.get('cluster', '')}. Seed {result['seed']}, {result['rounds']} rounds, "
             f"{result.get('duration_s', 0):.0f} s, {result['machine']['time']}, on the shared {result['machine']['cpus']}-core "
             f"machine of this page. At most {result.get('bookie_budget', '?')} bookie fault(s) at once (write "
             "quorum - ack quorum).", "",
             f"Verdict: **{'no violation' if result['valid'] else 'VIOLATIONS FOUND'}**"
             + (f" (the run stopped early: {result['error']})" if "error" in result else "") + ".", "",
             "| faults injected | count |", "|---|---|",
             *(f"| {k} | {v} |" for k, v in sorted(result.get("faults", {}).items())), "",
             f"Operations: {ops.get('send invoke', 0):,} sends ({ops.get('send ok', 0):,} acknowledged, "
             f"{ops.get('send unknown', 0):,} unknown, {ops.get('send fail', 0):,} failed), "
             f"{ops.get('receive ok', 0):,} deliveries, {ops.get('read ok', 0):,} tailing reads, "
             f"{ops.get('final-read ok', 0):,} messages in the final reads.", "",
             "| checker figure | count | must be 0 |", "|---|---|---|",
             *(f"| {LABELS[k]} | {f[k]['count']:,} | {'yes' if k in VIOLATIONS else ''} |" for k in (*VIOLATIONS, *COUNTS)),
             "", "Unavailability per fault kind: the longest gap between two acknowledgements of any one producer "
             "overlapping the fault (injection to heal, and a heal waits until the target serves again), in seconds:",
             "", "| fault | faults | p50 | p90 | max |", "|---|---|---|---|---|",
             *(f"| {k} | {v['faults']} | {_s(v['p50'])} | {_s(v['p90'])} | {_s(v['max'])} |"
               for k, v in result["unavailability_s"].items()), ""]
    return lines


def write_section(result: dict, directory: str | Path) -> Path:
    path = Path(directory) / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.rstrip("\n").split("\n")
    new = section(result)
    bounds = section_bounds(lines, HEADING)
    if bounds:
        lines[bounds[0]:bounds[1]] = new
    else:
        lines += ["", *new]
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
