"""`all` suite: every suite in one run, in order, each with its own same-run references.

``python -m loadtest.bench all --report docs/`` also writes docs/BENCHMARKS.md and its charts from the
results (loadtest/bench/markdown.py).
"""

from __future__ import annotations

import importlib
import traceback

SUITES = ("ledger", "broker", "client", "peers", "failover", "recovery", "spark", "tls", "hostile", "compaction",
          "cores")


def run(quick: bool = False, only: tuple[str, ...] = SUITES) -> dict:
    unknown = set(only) - set(SUITES)
    if unknown:
        raise ValueError(f"no such suite in `all`: {', '.join(sorted(unknown))} (suites: {', '.join(SUITES)})")
    results: dict = {}
    for name in (s for s in SUITES if s in only):
        print(f"\n######## {name} ########", flush=True)
        try:
            results[name] = importlib.import_module(f"loadtest.bench.{name}").run(quick=quick)
        except Exception as exc:  # one broken suite must not cost the figures of the others
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return results
