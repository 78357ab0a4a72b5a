"""The generated BENCHMARKS.md, from a complete `all` result set (a real run's JSON, kept as test data)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from loadtest.bench.markdown import write_report

DOC = json.loads((Path(__file__).parent / "data" / "bench-all.json").read_text())


def _targets(text: str) -> dict[str, str]:
    section = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].lstrip("| "): cells[-1].rstrip(" |") for cells in rows[1:]}


def test_every_suite_gets_its_section_and_every_target_a_verdict(tmp_path):
    text = write_report(DOC, tmp_path, "python -m loadtest.bench all --report docs/").read_text()
    for heading in ("## Machine", "## Targets", "## Ledger store", "## Broker", "## The magnetar client beside pulsar-client",
                    "## Peers and physical limits", "## Failover", "## Spark source", "## Reading these figures"):
        assert heading in text
    verdicts = _targets(text)
    assert len(verdicts) == 19  # 18 + the Spark cold query (this older run has no warm query)
    assert all(v in ("**met**", "**not met**") for name, v in verdicts.items() if not name.startswith("locust"))
    assert text.count("Reproduce: `python -m loadtest.bench") == 6
    for chart in ("bench-throughput-by-size.png", "bench-latency-cdf.png"):
        assert (tmp_path / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missed_target_says_so(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["results"]["broker"]["latency"]["publish_p99_ms"] = 12.0
    peers = doc["results"]["peers"]
    peers["ratio_64k_to_journal_only_limit"]["magnetar"] = 0.49995  # just under: must not print as 50%
    verdicts = _targets(write_report(doc, tmp_path, "x").read_text())
    assert verdicts["publish p99 at 1,000 msg/s"] == "**not met**"
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| 49.9% (counting entry-log writes too" in text


def test_a_failed_suite_is_named_and_the_others_still_reported(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["results"]["spark"] = {"error": "RuntimeError: no Java"}
    text = write_report(doc, tmp_path, "x").read_text()
    assert "- `spark` failed: RuntimeError: no Java" in text
    assert "## Spark source" not in text and "## Broker" in text


def test_the_sync_api_produce_figure_gets_a_row_and_a_verdict(tmp_path):
    doc = copy.deepcopy(DOC)
    client = doc["results"]["client"]
    client["magnetar"]["sync_produce_msg_per_s"] = 123_456.0
    client["sync_produce_ratio"] = 0.42
    text = write_report(doc, tmp_path, "x").read_text()
    assert _targets(text)["magnetar sync API (magnetar.Client) produce vs pulsar-client"] == "**not met**"
    assert "| produce, sync API (`magnetar.Client`) | 123,456 msg/s |" in text


HOSTILE = json.loads((Path(__file__).parent / "data" / "bench-hostile-quick.json").read_text())


def test_the_hostile_suite_gets_a_row_per_attack_with_its_verdict(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["results"]["hostile"] = copy.deepcopy(HOSTILE)
    doc["results"]["hostile"]["attacks"]["far_future_acks"]["targets_met"]["p99_within_5x"] = False
    text = write_report(doc, tmp_path, "x").read_text()
    section = text.split("## Hostile clients", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 1 + len(HOSTILE["attacks"])  # the reference, then one per attack
    verdicts = {row.split(" | ")[0].lstrip("| "): row.split(" | ")[-1].rstrip(" |") for row in rows[1:]}
    assert verdicts["ACKs of random far-future positions, 1,000 ids per ACK, back to back"] == "**p99 not met**"
    assert verdicts["connections that never send CONNECT"] == "**met**"
    assert "Reproduce: `python -m loadtest.bench hostile" in section


def test_the_spark_section_has_the_warm_query_beside_the_cold_one(tmp_path):
    doc = copy.deepcopy(DOC)
    spark = doc["results"]["spark"]
    spark["warm"] = {"magnetar_source": {"rows": 1_000_000, "seconds": 4.0, "rows_per_s": 250_000.0},
                     "rate_source": {"rows": 1_000_000, "seconds": 2.0, "rows_per_s": 500_000.0}, "ratio": 0.5}
    text = write_report(doc, tmp_path, "x").read_text()
    section = text.split("## Spark source", 1)[1].split("\n## ", 1)[0]
    assert "| warm | magnetar | 1,000,000 | 4.00 | 250,000 |" in section
    assert "| warm | ratio |  |  | 0.50 |" in section
    assert f"| cold | ratio |  |  | {spark['ratio']:.2f} |" in section


def test_the_spark_section_says_how_the_sessions_were_set_up(tmp_path):
    doc = copy.deepcopy(DOC)  # written when both sources shared one session
    section = lambda: write_report(doc, tmp_path, "x").read_text().split("## Spark source", 1)[1]  # noqa: E731
    assert "Both ran in one session, ours first" in section() and "fresh SparkSession" not in section()
    doc["results"]["spark"]["config"]["sessions"] = "one fresh driver process per source"
    assert "Each source runs in a fresh SparkSession" in section() and "Both ran in one session" not in section()


def _with_rabbitmq(doc: dict, stream_mb_per_s: dict[str, float]) -> dict:
    """The peers result as `bench peers` now writes it: both RabbitMQ kinds and the per-size ratios."""
    from loadtest.bench.peers import ratios_by_size

    peers = doc["results"]["peers"]
    for kind, scale in (("rabbitmq_stream", 1.0), ("rabbitmq_quorum", 0.25)):
        peers["by_size"][kind] = {size: {"produce_mb_per_s": mb * scale, "produce_msg_per_s": mb * scale * 1e6 / int(size)}
                                  for size, mb in stream_mb_per_s.items()}
    peers["ratios_by_size"] = ratios_by_size(peers["by_size"])
    return doc


def test_the_rabbitmq_peers_get_columns_ratios_and_per_size_verdicts(tmp_path):
    doc = copy.deepcopy(DOC)
    official = {size: r["produce_mb_per_s"] for size, r in doc["results"]["peers"]["by_size"]["pulsar_client"].items()}
    # the stream at a third of Magnetar at 100 B (3x: met), at half at 1 KiB (2x: not met), twice at 64 KiB (0.5x)
    stream = {size: mb / {"100": 3, "1024": 2, "16384": 1, "65536": 0.5}[size] for size, mb in official.items()}
    text = write_report(_with_rabbitmq(doc, stream), tmp_path, "x").read_text()
    verdicts = _targets(text)
    assert len(verdicts) == 19 + 3
    label = "vs RabbitMQ stream (Magnetar + pulsar-client)"
    assert verdicts[f"produce 100 B {label}"] == "**met**"
    assert verdicts[f"produce 1 KiB {label}"] == "**not met**"
    assert verdicts[f"produce 64 KiB {label}"] == "**not met**"
    section = text.split("## Peers and physical limits", 1)[1].split("\n## ", 1)[0]
    assert "| RabbitMQ stream (rstream) | RabbitMQ quorum queue (aio-pika) |" in section
    assert "| pulsar-client / RabbitMQ stream (rstream) | pulsar-client / RabbitMQ quorum queue (aio-pika) |" in section
    ratio_row = next(line for line in section.splitlines() if line.startswith("| 1,024 B |") and "x |" in line)
    assert "| 2.00x |" in ratio_row and "| 8.00x |" in ratio_row  # the quorum queue at a quarter of the stream
    assert "without fsync" in section and "fdatasyncs its write-ahead log" in section


def test_a_stream_target_out_of_reach_says_why_in_targets_and_the_peers_section(tmp_path):
    doc = copy.deepcopy(DOC)
    official = {size: r["produce_mb_per_s"] for size, r in doc["results"]["peers"]["by_size"]["pulsar_client"].items()}
    doc = _with_rabbitmq(doc, {size: mb * 2 for size, mb in official.items()})
    doc["results"]["peers"]["stream_targets"] = {
        "100": {"target": 3.0, "msg_per_s": 1_200_000.0, "mb_per_s": 120.0, "client_cpu_us_per_msg": 3.5,
                "cores": 2, "client_cores": 4.2, "vs_disk": 0.4},
        "65536": {"target": 1.0, "msg_per_s": 19_000.0, "mb_per_s": 1245.2, "client_cpu_us_per_msg": 60.0,
                  "cores": 2, "client_cores": 1.14, "vs_disk": 3.96}}
    text = write_report(doc, tmp_path, "x").read_text()
    targets = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    small = next(line for line in targets.splitlines() if line.startswith("| produce 100 B vs RabbitMQ stream"))
    assert "out of reach here: the client alone would need 4.2 cores of 2)" in small and "**not met**" in small
    big = next(line for line in targets.splitlines() if line.startswith("| produce 64 KiB vs RabbitMQ stream"))
    assert "out of reach here: 4.0x the disk's fsync'd bandwidth)" in big and "cores" not in big
    kib = next(line for line in targets.splitlines() if line.startswith("| produce 1 KiB vs RabbitMQ stream"))
    assert "out of reach" not in kib  # no figures for it, so no claim
    section = text.split("## Peers and physical limits", 1)[1].split("\n## ", 1)[0]
    assert "| 100 B | 3x | 1,200,000 msg/s (120.0 MB/s) | 3.50 µs | 4.2 of 2 | 0.40x |" in section
    assert "| 64 KiB | 1x | 19,000 msg/s (1,245.2 MB/s) | 60.00 µs | 1.1 of 2 | 3.96x |" in section


def test_the_fsync_off_and_deep_window_rows_get_their_own_ratios_and_the_report_says_who_fsyncs(tmp_path):
    from loadtest.bench.peers import FSYNCS

    doc = copy.deepcopy(DOC)
    peers = doc["results"]["peers"]
    official = {size: r["produce_mb_per_s"] for size, r in peers["by_size"]["pulsar_client"].items()}
    for kind, scale in (("pulsar_client_no_fsync", 4.0), ("pulsar_client_deep", 2.0)):
        peers["by_size"][kind] = {size: {"produce_mb_per_s": mb * scale, "produce_msg_per_s": mb * scale * 1e6 / int(size)}
                                  for size, mb in official.items()}
    peers["config"] = {**peers["config"], "fsyncs": FSYNCS, "window": 512, "magnetar_batch": 64}
    stream = {size: mb * 2 for size, mb in official.items()}  # the stream at twice the durable pulsar-client row
    section = write_report(_with_rabbitmq(doc, stream), tmp_path, "x").read_text()
    section = section.split("## Peers and physical limits", 1)[1].split("\n## ", 1)[0]
    assert "| Magnetar + pulsar-client, journal fsync off |" in section  # a column of the MB/s table
    no_fsync = next(line for line in section.splitlines()
                    if line.startswith("| 1,024 B | Magnetar + pulsar-client, journal fsync off |"))
    assert "| 2.00x |" in no_fsync  # 4x the durable row over a stream at 2x it
    deep = next(line for line in section.splitlines()
                if line.startswith("| 1,024 B | Magnetar + pulsar-client, 50,000 pending |"))
    assert "| 1.00x |" in deep
    assert ("Magnetar + pulsar-client: yes; Magnetar + pulsar-client, 50,000 pending: yes; "
            "Magnetar + pulsar-client, journal fsync off: **no**") in section
    assert "RabbitMQ stream (rstream): **no**; RabbitMQ quorum queue (aio-pika): yes" in section


def test_the_ledger_section_shows_each_window_the_simpletest_burst_and_both_steady_runs(tmp_path):
    doc = copy.deepcopy(DOC)
    ledger = doc["results"]["ledger"]
    ledger["window_1k"] = {str(w): {"entries_per_s": 1000.0 * w ** 0.5, "add_p50_ms": 1.0 + w / 10, "add_p99_ms": 5.0 + w,
                                    "littles_law_ms": w / (1000.0 * w ** 0.5) * 1000} for w in (1, 16, 128, 1024)}
    ledger["throughput_1k"] = {**ledger["throughput_1k"], **ledger["window_1k"]["1024"]}
    ledger["simpletest_1k"] = {"entries": 1000, "window": 1000, "entries_per_s": 64_000.0, "add_p50_ms": 12.0}
    ledger["simpletest_to_sustained"] = 2.0
    ledger["steady_1000_per_s_flush_when_empty"] = {"add_p50_ms": 0.9, "add_p99_ms": 4.5}
    text = write_report(doc, tmp_path, "x").read_text()
    section = text.split("## Ledger store", 1)[1].split("\n## ", 1)[0]
    assert "| 1 KiB adds, window 16 in flight | 4,000 entries/s | p50 2.6 / p99 21.0 ms | window / rate = 4.0 ms" in section
    assert "| `bookie shell simpletest` loop (1,000 adds, window 1,000) | 64,000 entries/s | p50 12.0 ms | 2.00x" in section
    assert "| steady 1,000/s, bookies with `journal_flush_when_queue_empty` | p99 4.50 ms | p50 0.90 ms |" in section
    assert _targets(text)["ledger 1 KiB adds"] == "**met**"  # 32,000/s at window 1,024: the sustained figure


def test_the_cores_suite_gets_its_table_and_model(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["results"]["cores"] = json.loads((Path(__file__).parent / "data" / "bench-cores-quick.json").read_text())["results"]
    text = write_report(doc, tmp_path, "python -m loadtest.bench all --report docs/").read_text()
    section = text.split("## Use every core: broker workers", 1)[1].split("\n## ", 1)[0]
    assert "| 1-worker (reference) | produce, batches of up to 1,000 | 69,353 | 1.00 |" in section
    assert "| 2-workers | catch-up read | 152,911 | 1.47 |" in section
    assert "| produce, batches of 10 | 16 | CPU only | 21,622 (workers) | 80,000 (bookies) | 3.70 |" in section
    assert "Reproduce: `python -m loadtest.bench cores" in section


def test_the_cores_model_shows_the_bookies_each_core_count_needs(tmp_path):
    from loadtest.bench.cores import model

    doc = copy.deepcopy(DOC)
    cores = json.loads((Path(__file__).parent / "data" / "bench-cores-quick.json").read_text())["results"]
    cores["model"] = model(cores["1-worker"], cores["disk_64k"]["mb_per_s"] * 1e6)  # as a run now computes it
    doc["results"]["cores"] = cores
    text = write_report(doc, tmp_path, "python -m loadtest.bench all --report docs/").read_text()
    section = text.split("## Use every core: broker workers", 1)[1].split("\n## ", 1)[0]
    assert "| one worker per core, more bookies msg/s (bound) | ratio |" in section
    assert ("| produce, batches of 10 | 16 | CPU only | 21,622 (workers) | 80,000 (bookies) | 3.70 | "
            "191,045 (cores), --bookies 8 | 8.84 |") in section
    assert "≤ bookies / bookie cost (3 bookie processes, or `--bookies B`)" in section
