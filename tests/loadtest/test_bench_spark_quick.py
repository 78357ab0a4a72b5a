"""The Spark benchmark in --quick form: the magnetar source drains its backlog beside Spark's rate source."""

from __future__ import annotations

import pytest

from tests.loadtest.test_bench_quick import run_suite


@pytest.mark.timeout(900)  # two fresh SparkSessions, one per source, each starting a JVM
def test_spark_suite_quick_writes_complete_json(tmp_path):
    result, doc = run_suite("spark", tmp_path, timeout_s=840)
    assert "rate-micro-batch (reference)" in result.stdout
    r = doc["results"]
    for part in (r, r["warm"]):  # each session's first query, then a second one with the session warmed up
        assert part["magnetar_source"]["rows"] == r["config"]["backlog"] == 50_000  # every message, once
        assert part["rate_source"]["rows"] >= r["config"]["backlog"]
        for side in ("magnetar_source", "rate_source"):
            assert part[side]["rows_per_s"] == part[side]["rows"] / part[side]["seconds"] > 0
        assert part["ratio"] == part["magnetar_source"]["rows_per_s"] / part["rate_source"]["rows_per_s"]
    # Measured the same way: each source in a driver process (and so a SparkSession and JVM) of its own, cold
    # then warm in it, so neither pays the other's start-up costs nor gets the other's warm-up.
    ours = {r["magnetar_source"]["driver_pid"], r["warm"]["magnetar_source"]["driver_pid"]}
    reference = {r["rate_source"]["driver_pid"], r["warm"]["rate_source"]["driver_pid"]}
    assert len(ours) == len(reference) == 1 and ours != reference
