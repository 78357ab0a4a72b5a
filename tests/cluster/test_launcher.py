"""`python -m tests.cluster` starts a whole cluster, obeys fault commands, and stops it all."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_launcher_kills_and_restarts_a_broker(tmp_path):
    script = "status\nkill broker 0\nstatus\nrestart broker 0\nstatus\nnonsense\nquit\n"
    result = subprocess.run([sys.executable, "-m", "tests.cluster", "--brokers", "1", "--bookies", "3",
                             "--root", str(tmp_path)], input=script, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "cluster up" in out and "kill broker 0: done" in out and "restart broker 0: done" in out
    statuses = [line for line in out.splitlines() if line.startswith("broker 0")]
    assert [s.split()[-1] for s in statuses] == ["up", "up", "DOWN", "up"]
    assert "cannot do 'nonsense'" in out
