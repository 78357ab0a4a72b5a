"""`bookie standalone` (what `make run` starts): three bookies, self-test, clean Ctrl-C, restart on the same data."""

from __future__ import annotations

import signal
import subprocess
import time

from storage.testing.processes import VENV_BIN, free_port_block
from storage.testing.waiting import wait_until


def run_standalone(data_dir, port, http_port) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(
        [str(VENV_BIN / "bookie"), "--log-level", "WARNING", "standalone", "--data-dir", str(data_dir),
         "--port", str(port), "--http-port", str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []

    def ready() -> bool:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"standalone exited early ({proc.poll()}):\n" + "".join(lines))
        lines.append(line)
        return "Ctrl-C stops it" in line

    wait_until(ready, 60, "bookie standalone to report ready", interval_s=0)
    return proc, lines


def test_standalone_self_tests_stops_cleanly_and_restarts(tmp_path):
    port, http_port = free_port_block(3), free_port_block(3)
    proc, lines = run_standalone(tmp_path / "data", port, http_port)
    text = "".join(lines)
    assert text.count(" ready (") == 3
    for zone in ("zone-a", "zone-b", "zone-c"):
        assert f"/{zone}/" in text
    assert "self-test: wrote and read back 100 entries" in text and ": OK" in text
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    cookies = sorted(p.read_text() for p in (tmp_path / "data").rglob("cookie"))
    assert len(cookies) == 6  # journal and ledger dir of each bookie

    started = time.monotonic()
    again, lines = run_standalone(tmp_path / "data", port, http_port)
    assert "self-test" in "".join(lines) and ": OK" in "".join(lines), "".join(lines)
    assert sorted(p.read_text() for p in (tmp_path / "data").rglob("cookie")) == cookies
    again.send_signal(signal.SIGINT)
    assert again.wait(30) == 0
    assert time.monotonic() - started < 60
