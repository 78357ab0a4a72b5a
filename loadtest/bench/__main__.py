"""Entry point: ``python -m loadtest.bench ledger [--quick] [--out results/ledger.json]``."""

from __future__ import annotations

import argparse
import importlib
import sys

from loadtest.bench.report import write_json

SUITES = {"ledger": "loadtest.bench.ledger"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--quick", action="store_true", help="a short run (seconds), for smoke tests")
    parser.add_argument("--out", default=None, help="JSON output path (default results/bench-<suite>.json)")
    args = parser.parse_args(argv)
    results = importlib.import_module(SUITES[args.suite]).run(quick=args.quick)
    path = write_json(args.out or f"results/bench-{args.suite}.json", args.suite, results)
    print(f"\nJSON written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
