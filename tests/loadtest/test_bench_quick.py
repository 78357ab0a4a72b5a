"""The benchmark code path in --quick form, so it cannot rot: well-formed JSON with every field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from loadtest.bench.peers import PULSAR_CLIENT_ROWS
from storage.testing.processes import kill_tree

REPO = Path(__file__).resolve().parents[2]


def run_suite(suite: str, tmp_path, timeout_s: int, *extra: str):
    """``python -m loadtest.bench SUITE --quick``; asserts it exited 0 and returns (process, JSON document)."""
    out = tmp_path / f"{suite}.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # A suite that overruns is killed with every process it started (its standalone, Spark's driver and JVM), not
    # only the bench process, so none is left running into the next tests.
    proc = subprocess.Popen([sys.executable, "-m", "loadtest.bench", suite, "--quick", "--out", str(out), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)})
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException:  # the timeout, or pytest's own (an exception raised into this frame)
        kill_tree(proc.pid)
        proc.communicate()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list(scratch.iterdir()), "the suite left its data behind"
    return result, json.loads(out.read_text())


def test_ledger_suite_quick_writes_complete_json(tmp_path):
    result, doc = run_suite("ledger", tmp_path, timeout_s=300)
    assert "1 KiB adds" in result.stdout and "disk fdatasync 64 KiB" in result.stdout
    assert doc["suite"] == "ledger" and doc["machine"]["cpus"] >= 1
    r = doc["results"]
    for run in ("throughput_1k", "throughput_64k"):
        assert r[run]["entries_per_s"] > 0 and r[run]["mb_per_s"] > 0
        assert 0 < r[run]["add_p50_ms"] <= r[run]["add_p99_ms"] <= r[run]["add_max_ms"]
    for steady in ("steady_1000_per_s", "steady_1000_per_s_flush_when_empty"):
        assert r[steady]["entries"] == 3000 and r[steady]["add_p99_ms"] > 0 and len(r[steady]["round_p99_ms"]) == 2
        assert 0 <= r[steady]["send_lateness_p50_ms"] <= r[steady]["send_lateness_p99_ms"]
    assert [int(w) for w in r["window_1k"]] == r["config"]["windows"] == [1, 16, 128, 1024]
    for w, x in r["window_1k"].items():
        assert x["window"] == int(w) and x["littles_law_ms"] == int(w) / x["entries_per_s"] * 1000
    assert r["throughput_1k"] == r["window_1k"]["1024"]
    assert r["simpletest_1k"]["entries"] == 1000 and r["simpletest_1k"]["window"] == 1000
    assert r["simpletest_to_sustained"] == r["simpletest_1k"]["entries_per_s"] / r["throughput_1k"]["entries_per_s"]
    assert r["disk_64k"]["mb_per_s"] > 0 and r["physical_limit_64k_mb_per_s"] > 0
    assert r["ratio_64k_to_physical"] == r["throughput_64k"]["mb_per_s"] / r["physical_limit_64k_mb_per_s"]
    assert r["ratio_64k_to_sequential_limit"] == r["throughput_64k"]["mb_per_s"] / r["sequential_limit_mb_per_s"]


def test_client_suite_quick_compares_magnetar_with_the_official_client(tmp_path):
    result, doc = run_suite("client", tmp_path, timeout_s=600)
    r = doc["results"]
    for side in ("magnetar", "official"):
        assert r[side]["consume_msg_per_s"] > 0
    assert r["magnetar"]["produce_msg_per_s"] > 0 and r["official"]["msg_per_s"] > 0
    assert r["magnetar"]["sync_produce_msg_per_s"] > 0
    # --quick runs one round, so each ratio is that round's
    assert r["produce_ratio"] == r["magnetar"]["produce_msg_per_s"] / r["official"]["msg_per_s"]
    assert r["sync_produce_ratio"] == r["magnetar"]["sync_produce_msg_per_s"] / r["official"]["msg_per_s"]
    assert "sync API (magnetar.Client)" in result.stdout


def test_failover_suite_quick_reports_both_figures(tmp_path):
    result, doc = run_suite("failover", tmp_path, timeout_s=600)
    r = doc["results"]
    assert r["trials"] == 2 and r["session_timeout_s"] == 30.0  # the headline row runs the broker's defaults
    assert r["tuned_session"]["session_timeout_s"] == 3.0
    for x in (r, r["tuned_session"]):
        assert len(x["kill9_to_first_ack_s"]["all"]) == 2
        assert 0 < x["kill9_to_first_ack_s"]["p50"] <= x["kill9_to_first_ack_s"]["max"]
        assert len(x["unload_publish_gap_s"]["all"]) == 2 and x["unload_publish_gap_s"]["max"] > 0


def test_all_suite_quick_writes_json_and_the_report_with_charts(tmp_path):
    """`all --only broker,peers --report DIR`: both suites' figures, BENCHMARKS.md, and its two PNG charts."""
    report = tmp_path / "report"
    result, doc = run_suite("all", tmp_path, 900, "--only", "broker,peers", "--report", str(report))
    assert "produce 100 B, batching" in result.stdout and "end-to-end at 1,000/s" in result.stdout
    r = doc["results"]["broker"]
    assert r["produce"]["msg_per_s"] > 0 and r["produce"]["failures"] == 0
    for run, prefix in (("latency", "publish"), ("e2e", "e2e")):
        assert r[run]["messages"] == 2000
        assert 0 < r[run][f"{prefix}_p50_ms"] <= r[run][f"{prefix}_p99_ms"] <= r[run][f"{prefix}_max_ms"]
        cdf = r[run][f"{prefix}_cdf_ms"]
        assert cdf[0][0] == 0 and cdf[-1] == [100, r[run][f"{prefix}_max_ms"]]
        assert [ms for _, ms in cdf] == sorted(ms for _, ms in cdf)
    assert r["catchup"]["backlog"] == 20_000 and r["catchup"]["msg_per_s"] > 0
    assert r["topics"]["topics"] == 50 and r["topics"]["rss_after_mb"] > 0
    assert r["disk_512b"]["fsyncs_per_s"] > 0 and r["config"]["deployment"] == "broker standalone"

    p = doc["results"]["peers"]
    assert p["nats_jetstream"]["produce_msg_per_s"] > 0 and p["nats_jetstream"]["consume_msg_per_s"] > 0
    assert p["pulsar_client"]["msg_per_s"] > 0 and p["magnetar"]["produce_msg_per_s"] > 0
    assert p["ratio_magnetar_to_nats"] == p["magnetar"]["produce_msg_per_s"] / p["nats_jetstream"]["produce_msg_per_s"]
    assert p["loopback_tcp_mb_per_s"] > 0 and p["disk_512b"]["fsyncs_per_s"] > 0
    for system in ("nats_jetstream", "rabbitmq_stream", "rabbitmq_quorum", "pulsar_client", "magnetar",
                   "pulsar_client_no_fsync", "pulsar_client_deep"):
        assert [int(s) for s in p["by_size"][system]] == p["config"]["sizes"] == [100, 1024, 16384, 65536]
        assert all(x["produce_mb_per_s"] > 0 for x in p["by_size"][system].values())
    for size in ("100", "65536"):
        for peer in ("nats_jetstream", "rabbitmq_stream", "rabbitmq_quorum"):
            assert p["ratios_by_size"][size][f"pulsar_client_to_{peer}"] == (
                p["by_size"]["pulsar_client"][size]["produce_mb_per_s"] / p["by_size"][peer][size]["produce_mb_per_s"])
    assert p["disk_64k_end"]["mb_per_s"] > 0 and p["disk_512b_end"]["fsyncs_per_s"] > 0  # the disk again, at the end
    fsyncs = p["config"]["fsyncs"]  # which rows fsync before confirming, as the report prints it
    assert fsyncs["pulsar_client"] and fsyncs["rabbitmq_quorum"] and not fsyncs["pulsar_client_no_fsync"]
    assert p["config"]["window"] == 512 and p["by_size"]["pulsar_client"]["100"]["failures"] == 0
    assert p["physical_limit_64k_mb_per_s"] == p["disk_64k"]["mb_per_s"] / 4  # Qw 2, journal + entry log
    assert p["journal_only_limit_64k_mb_per_s"] == p["disk_64k"]["mb_per_s"] / 2
    for size, need in p["stream_targets"].items():  # what each stream target would take, from this run
        assert need["client_cpu_us_per_msg"] == min(
            p["by_size"][m][size]["client_cpu_us_per_msg"] for m in PULSAR_CLIENT_ROWS) > 0
        assert need["msg_per_s"] == need["target"] * p["by_size"]["rabbitmq_stream"][size]["produce_msg_per_s"]
        assert need["cores"] >= 1 and need["vs_disk"] > 0
    assert set(p["stream_targets"]) == {"100", "1024", "65536"}
    assert p["ratio_64k_to_physical"]["magnetar"] == (
        p["by_size"]["magnetar"]["65536"]["produce_mb_per_s"] / p["physical_limit_64k_mb_per_s"])

    text = (report / "BENCHMARKS.md").read_text()
    for heading in ("## Machine", "## Targets", "## Broker", "## Peers and physical limits"):
        assert heading in text
    assert "produce 100 B vs NATS JetStream" in text and "publish p99 at 1,000 msg/s" in text
    assert "produce 64 KiB vs RabbitMQ stream" in text and "RabbitMQ quorum queue (aio-pika)" in text
    assert "Magnetar + pulsar-client, journal fsync off: **no**" in text
    assert "| size | target | the target's rate | pulsar-client CPU per message |" in text
    for chart in ("bench-throughput-by-size.png", "bench-latency-cdf.png"):
        assert f"]({chart})" in text
        assert (report / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cursor_suite_quick_measures_both_representations(tmp_path):
    result, doc = run_suite("cursor", tmp_path, timeout_s=300)
    assert "cursor ack state, 100,000 holes" in result.stdout
    for pattern in ("alternate", "random"):
        r = doc["results"][pattern]
        assert r["holes"] == 100_000 and abs(r["ranges"] - 100_000) <= 100  # ledger ends split or join a few
        assert 0 < r["memory_new_bytes"] < r["memory_old_set_bytes"]
        assert r["persist_new_s"] == r["persist_new_encode_s"] + r["persist_new_write_s"] > 0
        assert r["persist_old_capped_ranges"] == 10_000 and r["persist_old_full_encode_s"] > 0
        assert 0 < r["next_100_to_read_new_ms"] < r["next_100_to_read_old_ms"]


def test_recovery_suite_quick_times_the_repair_beside_the_disk(tmp_path):
    result, doc = run_suite("recovery", tmp_path, 600)
    r = doc["results"]
    assert "kill -9 of a bookie to fully replicated" in result.stdout
    assert 0 < r["detection_s"] < r["kill_to_replicated_s"] and r["repair_s"] > 0
    assert r["rereplicated_mb"] > 0 and r["rereplication_mb_per_s"] > 0 and r["disk_fsync_64k_mb_per_s"] > 0


def test_tls_suite_quick_measures_tls_beside_plain(tmp_path):
    result, doc = run_suite("tls", tmp_path, timeout_s=600)
    assert "produce over pulsar+ssl:// beside pulsar://" in result.stdout
    r = doc["results"]
    for client in ("official", "magnetar_sync"):
        for size in (100, 16 * 1024):
            figure = r[f"{client}_{size}"]
            assert figure["plain_msg_per_s"] > 0 and figure["tls_msg_per_s"] > 0
            assert figure["ratio"] == figure["runs"][0]["tls"] / figure["runs"][0]["plain"]


def test_cores_suite_quick_compares_one_worker_per_core_with_one(tmp_path):
    result, doc = run_suite("cores", tmp_path, timeout_s=900)
    assert "use every core" in result.stdout and "model (from the 1-worker run" in result.stdout
    r = doc["results"]
    labels = ["single-process", "1-worker"] + ([f"{r['cores']}-workers"] if r["cores"] > 1 else [])
    for label in labels:
        for phase in ("produce", "catchup", "produce-small"):
            p = r[label][phase]
            assert p["msg_per_s"] > 0 and p["messages"] > 0 and len(p["rounds_msg_per_s"]) == 1
            assert p["ratio_to_1_worker"] == p["msg_per_s"] / r["1-worker"][phase]["msg_per_s"]
    assert r["1-worker"]["produce"]["worker_cpu_s_per_m"] > 0 and r["1-worker"]["produce"]["bookie_cpu_s_per_m"] > 0
    assert r["single-process"]["produce"]["single_process_cpu_s_per_m"] > 0
    assert r["1-worker"]["catchup"]["messages"] == r["1-worker"]["produce"]["messages"] + 5_000 * r["config"]["topics"]
    for phase in ("produce", "catchup", "produce-small"):
        for cores in ("8", "16"):
            m = r["model"][phase][cores]["cpu_only"]
            assert m["ratio"] == m["n_workers"]["msg_per_s"] / m["one_worker"]["msg_per_s"] >= 1
