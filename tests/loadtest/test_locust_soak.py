"""The locust scenario's soak: 50 users for 10 minutes, zero failures, flat latency (slow: `make test-slow`)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.locust_run import is_flat, latency_drift

REPO = Path(__file__).resolve().parents[2]
HEADER = ["Timestamp", "User Count", "Type", "Name", "Requests/s", "Failures/s", "50%"]


def _history(tmp_path, samples: list[tuple[int, int, str]]) -> Path:
    path = tmp_path / "run_stats_history.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
        for t, users, p50 in samples:
            writer.writerow([t, users, "", "Aggregated", "100", "0", p50])
    return path


def test_drift_compares_the_first_and_last_minute_at_full_load(tmp_path):
    ramp = [(t, 10 * (t + 1), "80") for t in range(4)]  # ramp-up samples do not count
    steady = [(t, 50, "6") for t in range(4, 400)]
    drift = latency_drift(_history(tmp_path, ramp + steady + [(400, 50, "N/A")]))
    assert drift == {"users": 50, "seconds_at_full_load": 395, "first_p50_ms": 6.0, "last_p50_ms": 6.0}
    assert is_flat(drift, max_growth=2.0)


def test_latency_that_keeps_growing_is_not_flat(tmp_path):
    growing = [(t, 50, str(5 + t // 10)) for t in range(600)]
    drift = latency_drift(_history(tmp_path, growing))
    assert drift["last_p50_ms"] > 50 and not is_flat(drift, max_growth=2.0)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # ten minutes of load plus the broker's start and stop
def test_fifty_users_for_ten_minutes_with_zero_failures_and_flat_latency(start_standalone, tmp_path):
    broker = start_standalone()  # the fixture stops it even when the run is cut short
    prefix = tmp_path / "soak"
    result = subprocess.run([sys.executable, "-m", "loadtest.locust_run", "--users", "50", "--spawn-rate", "10",
                             "--duration", "10m", "--csv", str(prefix), "--check-flat", "--service-url", broker.service_url],
                            cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    with open(f"{prefix}_stats.csv", newline="") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    assert int(rows["Aggregated"]["Failure Count"]) == 0 and int(rows["publish"]["Request Count"]) > 10_000
    assert "flat" in result.stdout and "NOT flat" not in result.stdout
