"""A short nemesis run against a real cluster: 5 rounds of mixed faults, and the checker finds nothing.

ZooKeeper, 4 bookies in 3 zones and 3 brokers (E3/Qw3/Qa2), both clients producing and consuming, through the
real command line. Any lost, phantom, reordered, fenced or duplicated (with dedup) message fails it, and so
does a fault whose target did not come back.
"""

from __future__ import annotations

import json
import subprocess
import sys

SEED = 4  # mixed: bit flip, full disk, partition, kill and pause of brokers and bookies, a lost bookie (all kinds registered)


def test_five_rounds_of_mixed_faults_lose_nothing(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.nemesis", "--seed", str(SEED), "--rounds", "5", "--linearizable",
         "--out-dir", str(out)], capture_output=True, text=True, timeout=280)
    print(done.stdout[-6000:], done.stderr[-3000:])
    result = json.loads((out / "result.json").read_text())
    assert done.returncode == 0, f"exit {done.returncode}; replay: {result['replay']}"
    assert "error" not in result and result["valid"]
    assert all(v == 0 for v in (result["findings"][k]["count"] for k in (
        "lost", "phantom", "order", "fenced_read", "dedup_duplicates", "linearizable")))
    assert sum(result["faults"].values()) >= 5 and len(result["faults"]) >= 2  # every round injected; mixed kinds
    assert result["operations"]["send ok"] > 500 and result["operations"]["final-read ok"] >= result["operations"]["send ok"]
    assert f"--seed {SEED} --rounds 5" in result["replay"]


def test_kill_9_of_the_default_standalone_loses_nothing(tmp_path):
    """``--standalone`` targets `broker standalone` as `make run` starts it (supervisor, bookie processes, a worker
    per core): each round kills the supervisor with SIGKILL, its children go with it, and it is started again on
    the same data directory."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.nemesis", "--standalone", "--seed", "3", "--rounds", "3", "--linearizable",
         "--out-dir", str(out)], capture_output=True, text=True, timeout=280)
    print(done.stdout[-6000:], done.stderr[-3000:])
    result = json.loads((out / "result.json").read_text())
    assert done.returncode == 0, f"exit {done.returncode}; replay: {result['replay']}"
    assert "worker per core" in done.stdout
    assert result["valid"] and result["faults"] == {"kill-standalone": 3}
    assert all(result["findings"][k]["count"] == 0 for k in ("lost", "phantom", "order", "linearizable"))
    assert result["operations"]["send ok"] > 500 and result["operations"]["final-read ok"] >= result["operations"]["send ok"]
