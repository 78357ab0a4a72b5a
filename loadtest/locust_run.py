"""`python -m loadtest.locust_run [--users 50 --spawn-rate 10 --duration 60s] [--service-url URL]`.

Runs the locust scenario (loadtest/locustfile.py) headless and prints locust's summary. Without
``--service-url`` it starts its own `broker standalone` in a temporary directory first (what `make loadtest`
does). Exits 1 when any request failed, so a run with failures never looks green.

``--check-flat`` also compares the median latency of the first and the last minute at full load (from
locust's stats history) and exits 1 when it grew by more than ``--max-growth`` (the soak test's check).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def latency_drift(history_csv: str | Path, window_s: int = 60) -> dict:
    """Median of locust's rolling p50 over the first and the last ``window_s`` seconds at full user count."""
    with open(history_csv, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Name"] == "Aggregated" and r["50%"] not in ("", "N/A")]
    if not rows:
        raise ValueError(f"{history_csv} has no latency samples")
    users = max(int(r["User Count"]) for r in rows)
    full = [(int(r["Timestamp"]), float(r["50%"])) for r in rows if int(r["User Count"]) == users]
    start, end = full[0][0], full[-1][0]
    first = [p50 for t, p50 in full if t < start + window_s]
    last = [p50 for t, p50 in full if t > end - window_s]
    return {"users": users, "seconds_at_full_load": end - start, "first_p50_ms": statistics.median(first),
            "last_p50_ms": statistics.median(last)}


def is_flat(drift: dict, max_growth: float, slack_ms: float = 5.0) -> bool:
    """Flat: the last minute's median is within ``max_growth`` x the first's (plus a few ms for noise)."""
    return drift["last_p50_ms"] <= drift["first_p50_ms"] * max_growth + slack_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.locust_run", description=__doc__)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--spawn-rate", type=float, default=10)
    parser.add_argument("--duration", default="60s")
    parser.add_argument("--service-url", default=None)
    parser.add_argument("--csv", default="results/locust", help="CSV prefix for locust's stats")
    parser.add_argument("--check-flat", action="store_true", help="fail when latency grew over the run")
    parser.add_argument("--max-growth", type=float, default=2.0)
    args = parser.parse_args(argv)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    # The broker's data directory goes with the run: each run writes its own, and left behind they pile up.
    with tempfile.TemporaryDirectory(prefix="magnetar-locust-", ignore_cleanup_errors=True) as scratch:
        broker = None
        if args.service_url is None:
            from storage.testing.processes import BrokerProcess

            broker = BrokerProcess(Path(scratch) / "data")
            broker.start(timeout_s=90)
            args.service_url = broker.service_url
        try:
            result = subprocess.run([
                sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless", "-u", str(args.users),
                "-r", str(args.spawn_rate), "-t", args.duration, "--csv", args.csv, "--only-summary",
                "--service-url", args.service_url,
            ], timeout=3600)
            if broker is not None and result.returncode != 0:
                print(f"broker log (removed with the run's directory):\n{broker.log_tail(40)}", file=sys.stderr)
        finally:
            if broker is not None:
                broker.stop()
    with open(f"{args.csv}_stats.csv", newline="") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    total = rows.get("Aggregated", {})
    failures = int(total.get("Failure Count", 1))
    print(f"\nlocust: {total.get('Request Count')} requests, {failures} failures "
          f"(locust exit {result.returncode}); stats in {args.csv}_stats.csv")
    ok = failures == 0 and int(total.get("Request Count", 0)) > 0
    if args.check_flat:
        drift = latency_drift(f"{args.csv}_stats_history.csv")
        flat = is_flat(drift, args.max_growth)
        print(f"latency: first minute p50 {drift['first_p50_ms']:.1f} ms, last minute p50 {drift['last_p50_ms']:.1f} ms "
              f"over {drift['seconds_at_full_load']} s at {drift['users']} users: {'flat' if flat else 'NOT flat'}")
        ok = ok and flat
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
