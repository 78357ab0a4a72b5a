"""`python -m loadtest.bench streams --quick`: the Stream API beside the Pulsar protocol, well-formed JSON."""

from __future__ import annotations

from tests.loadtest.test_bench_quick import run_suite


def test_streams_suite_quick_reports_both_sides_and_their_ratios(tmp_path):
    result, doc = run_suite("streams", tmp_path, timeout_s=600)
    r = doc["results"]
    assert doc["suite"] == "streams" and r["config"]["quick"] and r["config"]["rounds"] == 1
    for side in ("stream", "pulsar"):
        assert r[side]["single_records_per_s"] > 0 and r[side]["batched_records_per_s"] > 0
        for kind in ("append", "tail"):
            assert 0 < r[side][f"{kind}_p50_ms"] <= r[side][f"{kind}_p99_ms"]
    # one round: each ratio is that round's
    assert r["ratio"]["single_records_per_s"] == r["stream"]["single_records_per_s"] / r["pulsar"]["single_records_per_s"]
    assert r["ratio"]["tail_p50_ms"] == r["stream"]["tail_p50_ms"] / r["pulsar"]["tail_p50_ms"]
    assert "Stream API (gRPC) beside the Pulsar protocol" in result.stdout
