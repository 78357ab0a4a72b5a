"""The Spark benchmark in --quick form: the magnetar source drains its backlog beside Spark's rate source."""

from __future__ import annotations

from tests.loadtest.test_bench_quick import run_suite


def test_spark_suite_quick_writes_complete_json(tmp_path):
    result, doc = run_suite("spark", tmp_path, timeout_s=600)
    assert "rate-micro-batch (reference)" in result.stdout
    r = doc["results"]
    for part in (r, r["warm"]):  # the session's first query, then a second backlog with the workers running
        assert part["magnetar_source"]["rows"] == r["config"]["backlog"] == 50_000  # every message, once
        assert part["rate_source"]["rows"] >= r["config"]["backlog"]
        for side in ("magnetar_source", "rate_source"):
            assert part[side]["rows_per_s"] == part[side]["rows"] / part[side]["seconds"] > 0
        assert part["ratio"] == part["magnetar_source"]["rows_per_s"] / part["rate_source"]["rows_per_s"]
