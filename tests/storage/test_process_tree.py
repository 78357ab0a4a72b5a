"""The test harness's process-tree helpers (storage/testing/processes.py): a bench or fixture that overruns is
killed with everything it started, including children in sessions of their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storage.testing.processes import kill_tree, process_alive, process_tree
from storage.testing.waiting import wait_until

# A parent that starts a grandchild in a session of its own (as BrokerProcess starts a standalone), writes its pid
# and waits.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def test_kill_tree_kills_a_descendant_in_a_session_of_its_own(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file)])
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the grandchild's pid")
        child = int(pid_file.read_text())
        assert process_tree(parent.pid) == [parent.pid, child]
        kill_tree(parent.pid)
        parent.wait(10)
        wait_until(lambda: not process_alive(child), 10, "the grandchild to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_kill_tree_of_a_process_that_is_gone_does_nothing():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(10)
    kill_tree(done.pid)  # no ProcessLookupError
    assert process_tree(done.pid) == [done.pid]
