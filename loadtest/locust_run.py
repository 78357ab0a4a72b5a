"""`python -m loadtest.locust_run [--users 50 --spawn-rate 10 --duration 60s] [--service-url URL]`.

Runs the locust scenario (loadtest/locustfile.py) headless and prints locust's summary. Without
``--service-url`` it starts its own `broker standalone` in a temporary directory first (what `make loadtest`
does). Exits 1 when any request failed, so a run with failures never looks green.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.locust_run", description=__doc__)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--spawn-rate", type=float, default=10)
    parser.add_argument("--duration", default="60s")
    parser.add_argument("--service-url", default=None)
    parser.add_argument("--csv", default="results/locust", help="CSV prefix for locust's stats")
    args = parser.parse_args(argv)
    broker = None
    if args.service_url is None:
        from tests.harness.processes import BrokerProcess

        broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="magnetar-locust-")) / "data")
        broker.start(timeout_s=90)
        args.service_url = broker.service_url
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run([
            sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless", "-u", str(args.users),
            "-r", str(args.spawn_rate), "-t", args.duration, "--csv", args.csv, "--only-summary",
            "--service-url", args.service_url,
        ], timeout=3600)
    finally:
        if broker is not None:
            broker.stop()
    with open(f"{args.csv}_stats.csv", newline="") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    total = rows.get("Aggregated", {})
    failures = int(total.get("Failure Count", 1))
    print(f"\nlocust: {total.get('Request Count')} requests, {failures} failures "
          f"(locust exit {result.returncode}); stats in {args.csv}_stats.csv")
    return 0 if failures == 0 and int(total.get("Request Count", 0)) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
