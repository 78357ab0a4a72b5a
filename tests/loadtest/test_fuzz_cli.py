"""`python -m loadtest.fuzz` in a short form (a few hundred inputs per decoder), and the reading of libFuzzer's
report from real outputs: a clean run and a crash (tests/loadtest/data/libfuzzer-crash.txt, recorded from
atheris 3.0 with a target that raises KeyError)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.fuzz.report import parse_libfuzzer

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("target", ["pulsar-frame", "bookie-request"])
def test_a_short_fuzz_run_tries_every_input_reaches_code_and_finds_no_crash(tmp_path, target):
    out = tmp_path / "summary.json"
    result = subprocess.run([sys.executable, "-m", "loadtest.fuzz", "--target", target, "--runs", "300",
                             "--artifacts", str(tmp_path / "artifacts"), "--json", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["target"] == target and summary["inputs_tried"] == 300
    assert summary["coverage_edges"] > 10 and summary["features"] >= summary["coverage_edges"]
    assert summary["crashes"] == 0 and summary["crash_files"] == []
    assert not any((tmp_path / "artifacts").iterdir())


def test_a_clean_report_gives_runs_coverage_and_corpus():
    text = ("#2\tINITED cov: 40 ft: 90 corp: 7/900b exec/s: 0 rss: 50Mb\n"
            "#1740\tREDUCE cov: 69 ft: 156 corp: 28/1554b lim: 176 exec/s: 0 rss: 57Mb L: 10/176 MS: 5 CopyPart-\n"
            "#2000\tDONE   cov: 69 ft: 156 corp: 28/1554b lim: 176 exec/s: 0 rss: 57Mb\n"
            "Done 2000 runs in 0 second(s)\n")
    r = parse_libfuzzer(text)
    assert (r.runs, r.cov, r.ft, r.corpus, r.crashed, r.crash_files) == (2000, 69, 156, 28, False, [])


def test_a_crash_report_names_the_crash_and_its_input():
    r = parse_libfuzzer((DATA / "libfuzzer-crash.txt").read_text())
    assert r.crashed
    assert r.crash_files == ["/tmp/crashart/crash-e9d71f5ee7c92d6dc9e92ffdad17b8bd49418f98"]


def test_a_report_without_stats_says_nothing_ran():
    r = parse_libfuzzer("Traceback (most recent call last):\nModuleNotFoundError: No module named 'atheris'\n")
    assert r.runs is None and not r.crashed
