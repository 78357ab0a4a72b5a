"""The locust scenario in a short form: it runs headless against a standalone broker with zero failures."""

import csv
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_locust_scenario_runs_with_zero_failures_and_leaves_no_broker_directory(tmp_path):
    prefix, scratch = tmp_path / "locust", tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run([sys.executable, "-m", "loadtest.locust_run", "--users", "5", "--spawn-rate", "5",
                             "--duration", "5s", "--csv", str(prefix)], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert list(scratch.glob("magnetar-locust-*")) == []  # the standalone's data directory went with the run
    with open(f"{prefix}_stats.csv", newline="") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    for name in ("publish", "consume"):
        assert int(rows[name]["Request Count"]) > 0 and int(rows[name]["Failure Count"]) == 0
