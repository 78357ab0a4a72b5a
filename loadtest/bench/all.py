"""`all` suite: every suite in one run, in order, each with its own same-run references.

``python -m loadtest.bench all --report docs/`` also writes docs/BENCHMARKS.md and its charts from the
results (loadtest/bench/markdown.py). Each suite's wall time goes into the results under ``durations_s``, so
the page says how long a run took and what to budget for the next.
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
import traceback

SUITES = ("ledger", "broker", "client", "peers", "failover", "recovery", "spark", "tls", "hostile", "compaction",
          "cores")
TIMING = "timing"


def takes_rounds(module) -> bool:
    """The suite repeats its phases in rounds (medians over them), and ``--rounds`` may set how many."""
    return "rounds" in inspect.signature(module.run).parameters


def run(quick: bool = False, only: tuple[str, ...] = SUITES, rounds: int | None = None) -> dict:
    """Every suite in ``only``; ``rounds`` (when set) for each suite that takes rounds, the others as they are."""
    unknown = set(only) - set(SUITES)
    if unknown:
        raise ValueError(f"no such suite in `all`: {', '.join(sorted(unknown))} (suites: {', '.join(SUITES)})")
    results: dict = {TIMING: {}}
    for name in (s for s in SUITES if s in only):
        print(f"\n######## {name} ########", flush=True)
        started, load = time.monotonic(), os.getloadavg()[0]
        try:
            module = importlib.import_module(f"loadtest.bench.{name}")
            kwargs = {"rounds": rounds} if rounds and takes_rounds(module) else {}
            results[name] = module.run(quick=quick, **kwargs)
        except Exception as exc:  # one broken suite must not cost the figures of the others
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[TIMING][name] = {"seconds": round(time.monotonic() - started, 1), "load_1m_at_start": round(load, 2)}
        print(f"######## {name}: {results[TIMING][name]['seconds']:.0f} s", flush=True)
    return results
