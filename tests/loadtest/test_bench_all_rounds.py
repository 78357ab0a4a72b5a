"""`bench all --rounds N`: the lighter full run passes N to the suites that repeat their phases, leaves the others
alone, and records each suite's wall time."""

from __future__ import annotations

import importlib
import types

import pytest

from loadtest.bench import __main__ as bench_main
from loadtest.bench import all as bench_all


def test_the_suites_named_in_the_help_are_the_ones_that_take_rounds():
    takes = {name for name in bench_all.SUITES if bench_all.takes_rounds(importlib.import_module(f"loadtest.bench.{name}"))}
    assert takes == set(bench_main.ROUNDS_SUITES)


def test_all_passes_rounds_only_to_suites_that_take_them_and_times_each(monkeypatch):
    calls = {}

    def fake(name, takes_rounds):
        if takes_rounds:
            def run(quick=False, rounds=None):
                calls[name] = {"quick": quick, "rounds": rounds}
                return {"ok": True}
        else:
            def run(quick=False):
                calls[name] = {"quick": quick}
                return {"ok": True}
        return types.SimpleNamespace(run=run)

    modules = {f"loadtest.bench.{n}": fake(n, n in bench_main.ROUNDS_SUITES) for n in bench_all.SUITES}
    monkeypatch.setattr(bench_all.importlib, "import_module", modules.__getitem__)
    results = bench_all.run(only=("ledger", "peers", "cores"), rounds=2)
    assert calls == {"ledger": {"quick": False, "rounds": 2}, "peers": {"quick": False}, "cores": {"quick": False, "rounds": 2}}
    assert set(results["timing"]) == {"ledger", "peers", "cores"}
    assert all(t["seconds"] >= 0 and t["load_1m_at_start"] >= 0 for t in results["timing"].values())
    bench_all.run(only=("cores",))
    assert calls["cores"] == {"quick": False, "rounds": None}  # each suite's own default


@pytest.mark.parametrize("argv, message", [
    (["all", "--rounds", "0"], "--rounds must be 1..20"),
    (["all", "--rounds", "21"], "--rounds must be 1..20"),
    (["peers", "--rounds", "2"], "--rounds applies to all and to ledger, client, tls, compaction, cores"),
    (["ledger", "--report", "docs/"], "--report and --only need the `all` suite"),
])
def test_bad_options_get_a_specific_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_real_all_run_with_rounds_repeats_the_suite_and_writes_its_time_into_json_and_page(tmp_path):
    """`all --only compaction --rounds 2 --quick --report DIR`, real processes: two rounds, each with its catch-up
    reference, the suite's wall time in the JSON and in the page's Machine table."""
    from tests.loadtest.test_bench_quick import run_suite

    report = tmp_path / "report"
    _, doc = run_suite("all", tmp_path, 600, "--only", "compaction", "--rounds", "2", "--report", str(report))
    c = doc["results"]["compaction"]
    assert c["config"]["rounds"] == 2 and len(c["runs"]) == 2
    assert all(run["catchup_msg_per_s"] > 0 for run in c["runs"])
    seconds = doc["results"]["timing"]["compaction"]["seconds"]
    assert seconds > 0
    assert f"compaction {seconds:.0f} s" in (report / "BENCHMARKS.md").read_text()
