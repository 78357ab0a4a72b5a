"""Entry point: ``python -m loadtest.bench SUITE [--quick] [--out results/bench-SUITE.json]``.

Suites: ``ledger`` (the ledger store alone); ``broker`` (every broker figure in one run, standalone),
``broker-cluster`` (the same against ZooKeeper + 3 bookie processes + `broker start`), or one of
``produce``, ``latency``, ``e2e``, ``catchup``, ``topics`` (the official client against `broker standalone`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from loadtest.bench.report import write_json

SUITES = {"ledger": ("loadtest.bench.ledger", None), "broker": ("loadtest.bench.broker", None)}
SUITES.update({name: ("loadtest.bench.broker", (name,)) for name in ("produce", "latency", "e2e", "catchup", "topics")})
SUITES["broker-cluster"] = ("loadtest.bench.broker", None)
SUITES["client"] = ("loadtest.bench.client", None)
SUITES["failover"] = ("loadtest.bench.failover", None)
SUITES["peers"] = ("loadtest.bench.peers", None)
SUITES["spark"] = ("loadtest.bench.spark", None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--quick", action="store_true", help="a short run (seconds), for smoke tests")
    parser.add_argument("--out", default=None, help="JSON output path (default results/bench-<suite>.json)")
    args = parser.parse_args(argv)
    module, only = SUITES[args.suite]
    kwargs = {"only": only} if only else {}
    if args.suite == "broker-cluster":
        kwargs["cluster"] = True
    results = importlib.import_module(module).run(quick=args.quick, **kwargs)
    path = write_json(args.out or f"results/bench-{args.suite}.json", args.suite, results)
    print(f"\nJSON written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
