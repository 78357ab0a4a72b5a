"""`bookie shell` against real bookie processes on a real ZooKeeper: every command, exit codes and output."""

from __future__ import annotations

import re
import subprocess

from storage.testing.processes import VENV_BIN


def shell(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "bookie"), "--log-level", "WARNING", "shell", "--metadata-store", url, *args],
                          capture_output=True, text=True, timeout=120)


def test_shell_commands_end_to_end(start_bookies):
    cluster = start_bookies(3)
    url = cluster.metadata_url

    listed = shell(url, "listbookies")
    assert listed.returncode == 0, listed.stderr
    for bookie in cluster.bookies:
        assert re.search(rf"{re.escape(bookie.bookie_id)}\s+\S+\s+{bookie.network_location}\s+writable", listed.stdout)
    assert "3 bookies (3 writable)" in listed.stdout

    simple = shell(url, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "500", "--size", "200")
    assert simple.returncode == 0, simple.stderr
    assert "read back and verified 500 entries: OK" in simple.stdout
    assert re.search(r"entries/s.*p50 [\d.]+ ms.*p99 [\d.]+ ms", simple.stdout)
    ledger_id = re.search(r"^ledger (\d+) on", simple.stdout, re.M).group(1)

    info = shell(url, "ledger", ledger_id)
    assert info.returncode == 0 and "state CLOSED" in info.stdout and "last entry 499" in info.stdout
    assert "fragment from entry 0:" in info.stdout

    read = shell(url, "readledger", ledger_id, "--first", "10", "--last", "12")
    assert read.returncode == 0 and "entry 10: 200 B" in read.stdout and "3 entries" in read.stdout

    assert shell(url, "deleteledger", ledger_id).returncode == 0
    missing = shell(url, "ledger", ledger_id)
    assert missing.returncode == 1 and "NoSuchLedgerError" in missing.stderr


def test_simpletest_with_impossible_quorum_fails_clearly(start_bookies):
    cluster = start_bookies(3)
    result = shell(cluster.metadata_url, "simpletest", "-e", "2", "-w", "3", "-a", "2", "-n", "10")
    assert result.returncode == 1
    assert "InvalidQuorumError" in result.stderr and "ensemble >= write quorum" in result.stderr


def test_global_options_go_before_or_after_the_command_and_ledgers_list_one_per_line(start_bookies):
    cluster = start_bookies(3)
    url = cluster.metadata_url
    after = subprocess.run([str(VENV_BIN / "bookie"), "--log-level", "WARNING", "shell", "listbookies",
                            "--metadata-store", url], capture_output=True, text=True, timeout=120)
    assert after.returncode == 0, after.stderr
    assert after.stdout == shell(url, "listbookies").stdout

    ids = []
    for _ in range(2):
        made = shell(url, "simpletest", "-n", "10")
        assert made.returncode == 0, made.stderr
        ids.append(re.search(r"^ledger (\d+) on", made.stdout, re.M).group(1))
    listed = shell(url, "listledgers")
    assert listed.returncode == 0 and listed.stdout.splitlines() == ids
    healthy = shell(url, "listunderreplicated")
    assert healthy.returncode == 0 and healthy.stdout == ""

    missing = subprocess.run([str(VENV_BIN / "bookie"), "shell", "listledgers"], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "--metadata-store URL is required" in missing.stderr
