"""The compaction benchmark in --quick form: every figure present, each beside its same-run catch-up reference."""

from __future__ import annotations

from tests.loadtest.test_bench_quick import run_suite


def test_compaction_suite_quick_measures_beside_the_catchup_read(tmp_path):
    result, doc = run_suite("compaction", tmp_path, timeout_s=600)
    assert "compaction beside a catch-up read" in result.stdout
    r = doc["results"]
    (run,) = r["runs"]
    assert run["keys"] == r["config"]["keys"] == 2_000 and run["messages"] == 20_000
    assert r["catchup_msg_per_s"] > 0 and r["compaction_msg_per_s"] > 0 and r["compacted_read_msg_per_s"] > 0
    assert r["compaction_to_catchup"] == run["compaction_msg_per_s"] / run["catchup_msg_per_s"]
    assert r["compacted_read_to_catchup"] == run["compacted_read_msg_per_s"] / run["catchup_msg_per_s"]
    assert r["table_time_speedup"] == run["catchup_s"] / run["compacted_read_s"] > 0
