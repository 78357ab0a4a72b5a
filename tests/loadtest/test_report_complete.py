"""The page `bench all --report docs/` writes, from one result per suite: every section, target and explanation.

The fixture (data/bench-all-complete.json) holds a result of every suite in `all` in the shape each suite writes
today: session 8's saved full runs where they were kept (ledger, client, failover, recovery, spark, tls, hostile,
compaction), the older full `all` run's broker figures, and a quick run's peers (with RabbitMQ) and cores. The
lead regenerates docs/BENCHMARKS.md from one real run; these tests make sure that run's page loses nothing the
hand-kept page had.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from loadtest.bench import all as bench_all
from loadtest.bench.markdown import write_report
from loadtest.nemesis.__main__ import main as nemesis_main

DATA = Path(__file__).parent / "data"
DOC = json.loads((DATA / "bench-all-complete.json").read_text())
COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"
COMMAND = "python -m loadtest.bench all --report docs/"

# One section per suite of `all`, in the page's order; a suite added to `all` without a section fails here.
SECTIONS = {"ledger": "## Ledger store", "broker": "## Broker", "client": "## The magnetar client beside pulsar-client",
            "peers": "## Peers and physical limits", "failover": "## Failover", "recovery": "## Autorecovery",
            "spark": "## Spark source", "tls": "## TLS", "hostile": "## Hostile clients", "compaction": "## Compaction",
            "cores": "## Use every core: broker workers"}
HEADINGS = ["## Machine", "## Targets", *SECTIONS.values(), "## Reading these figures", "## Nemesis"]


def _page(tmp_path: Path, doc: dict = DOC, previous: Path | None = COMMITTED) -> str:
    if previous is not None:
        shutil.copy(previous, tmp_path / "BENCHMARKS.md")
    return write_report(doc, tmp_path, COMMAND).read_text()


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    """The page from the fixture over a copy of the committed one (drawn once: the charts take seconds)."""
    return _page(tmp_path_factory.mktemp("page"))


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def _section(text: str, heading: str) -> str:
    return text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def _targets(text: str) -> dict[str, tuple[str, str]]:
    rows = [line.strip("| ").split(" | ") for line in _section(text, "## Targets").splitlines() if line.startswith("| ")]
    return {cells[0]: (cells[1], cells[-1]) for cells in rows[2:]}


def test_every_suite_of_all_has_a_section_and_the_page_has_every_heading_in_order(page):
    assert set(SECTIONS) == set(bench_all.SUITES)
    assert _headings(page) == HEADINGS


def test_no_section_of_the_committed_page_is_lost(page):
    generated = _headings(page)
    assert [h for h in _headings(COMMITTED.read_text()) if h not in generated] == []


def test_each_suite_section_has_its_reproduce_line(page):
    text = page
    for suite, heading in SECTIONS.items():
        assert f"Reproduce: `python -m loadtest.bench {suite}" in _section(text, heading), suite


def test_the_targets_of_issues_18_and_24_each_have_a_row_and_a_verdict_from_the_figures(page):
    r = DOC["results"]
    targets = _targets(page)
    stream = r["peers"]["ratios_by_size"]
    expected = {  # row -> the verdict the fixture's figures call for
        "produce 100 B vs RabbitMQ stream (Magnetar + pulsar-client)": stream["100"]["pulsar_client_to_rabbitmq_stream"] >= 3,
        "produce 1 KiB vs RabbitMQ stream (Magnetar + pulsar-client)": stream["1024"]["pulsar_client_to_rabbitmq_stream"] >= 3,
        "produce 64 KiB vs RabbitMQ stream (Magnetar + pulsar-client)": stream["65536"]["pulsar_client_to_rabbitmq_stream"] >= 1,
        "Spark source vs Spark's rate source, cold query": r["spark"]["ratio"] >= 0.5,
        "Spark source vs Spark's rate source, warm query": r["spark"]["warm"]["ratio"] >= 0.5,
        "ledger adds p99 at a steady 1,000/s": r["ledger"]["steady_1000_per_s"]["add_p99_ms"] <= 10,
        "hostile: broker RSS peak over every attack": True,
        "hostile: the broker stays up through every attack": True,
    }
    for name, attack in r["hostile"]["attacks"].items():
        short = {"ack_bomb": "ACK bomb", "big_messages_unread": "5 MiB producer, receipts unread"}.get(name)
        if short:
            expected[f"hostile: {short}, good client's publish p99 vs its no-attack p99"] = attack["p99_ratio"] <= 5
    for row, met in expected.items():
        assert targets[row][1] == ("**met**" if met else "**not met**"), row
    hostile_rows = [name for name in targets if name.startswith("hostile: ") and "p99" in name]
    assert len(hostile_rows) == len(r["hostile"]["attacks"])
    # the fixture has both verdicts, so a table that says "met" everywhere cannot pass
    assert {v for _, v in targets.values()} >= {"**met**", "**not met**"}


def test_a_hostile_attack_over_5x_or_1_gib_is_not_met(tmp_path):
    doc = copy.deepcopy(DOC)
    attack = doc["results"]["hostile"]["attacks"]["poison_batch"]
    attack["p99_ratio"], attack["targets_met"]["p99_within_5x"] = 5.2, False
    attack["rss_peak_mb"], attack["targets_met"]["rss_under_1_gib"] = 1100.0, False
    targets = _targets(_page(tmp_path, doc))
    assert targets["hostile: poison batch count, good client's publish p99 vs its no-attack p99"] == (
        f"5.2x ({attack['good_client']['p99_ms']:,.1f} vs {doc['results']['hostile']['reference']['p99_ms']:,.1f} ms)",
        "**not met**")
    assert targets["hostile: broker RSS peak over every attack"] == ("1,100 MB", "**not met**")


@pytest.mark.parametrize("heading, phrases", [
    ("## Ledger store", ["Little's law", "open loop", "The load generator itself sent"]),
    ("## Peers and physical limits", ["without fsync", "fdatasyncs its write-ahead log", "page cache",
                                      "Why two copies on one disk", "E1/Qw1/Qa1", "docs/ledger-store.md"]),
    ("## Failover", ["before the take-over of dead owners", "broker.md"]),
    ("## Spark source", ["cold", "warm"]),
    ("## TLS", ["CPU-bound", "replicated fsyncs", "pulsar-client 100 B 0.88-1.64"]),
    ("## Hostile clients", ["sibling topic", "command budgets", "brokerPublisherThrottlingMaxByteRate",
                            "hostile-clients.md"]),
    ("## Compaction", ["compacted ledger", "46,784-52,854 msg/s", "one per key"]),
    ("## Use every core: broker workers", ["The model for 8 and 16 cores", "bookie processes become the limit",
                                           "disk-bound", "Batches of 10"]),
])
def test_each_section_keeps_the_prose_that_explains_its_figures(page, heading, phrases):
    section = _section(page, heading)
    for phrase in phrases:
        assert phrase in section, phrase


def test_the_cores_explanation_is_computed_from_the_run(page):
    section = _section(page, "## Use every core: broker workers")
    cores = DOC["results"]["cores"]
    many = cores[f"{cores['cores']}-workers"]
    assert f"batched produce {many['produce']['ratio_to_1_worker']:.2f}x" in section
    small = cores["1-worker"]["produce-small"]
    crossover = 3 * small["worker_cpu_s_per_m"] / small["bookie_cpu_s_per_m"]
    assert f"once about {crossover:.0f} workers run" in section
    more = cores["model"]["catchup"]["16"]["cpu_only"]
    assert f"{more['ratio_more_bookies']:.1f}x (`--bookies {more['n_workers_more_bookies']['bookies']}`)" in section
    assert "stays disk-bound whatever B is" in section


def test_the_nemesis_section_is_carried_over_unchanged_and_says_when_it_ran(page):
    committed = COMMITTED.read_text()
    kept = "## Nemesis\n" + committed.split("\n## Nemesis\n", 1)[1]
    text = page
    assert text.endswith(kept)
    when = re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", kept).group(0)
    assert f"its own long run of `python -m loadtest.nemesis` at {when}, carried over unchanged" in text


def test_without_a_previous_page_the_report_says_no_nemesis_run_yet(tmp_path):
    text = _page(tmp_path, previous=None)
    assert "## Nemesis" not in text and "No nemesis run on this page yet" in text


def test_a_saved_nemesis_result_renders_the_section_in_place_and_all_keeps_it(tmp_path):
    """`python -m loadtest.nemesis --report-from RESULT --report DIR`, then `bench all --report DIR`."""
    result = {"seed": 3, "rounds": 5, "replay": "python -m loadtest.nemesis --seed 3 --rounds 5", "valid": True,
              "cluster": "ZooKeeper, 4 bookies", "duration_s": 42.0, "bookie_budget": 1,
              "machine": {"time": "2026-11-26T01:02:03Z", "cpus": 2}, "faults": {"kill-bookie": 2},
              "operations": {"send invoke": 10, "send ok": 10},
              "findings": {k: {"count": 0} for k in ("lost", "phantom", "failed_but_read", "order", "fenced_read",
                                                      "dedup_duplicates", "ordered_delivery", "key_order",
                                                      "subscription_missing", "linearizable", "duplicates",
                                                      "acked_redelivered", "fenced_writes", "unknown_stored",
                                                      "unknown_absent")},
              "unavailability_s": {"kill-bookie": {"faults": 2, "p50": 1.0, "p90": 2.0, "max": 2.5}}}
    shutil.copy(COMMITTED, tmp_path / "BENCHMARKS.md")
    (tmp_path / "result.json").write_text(json.dumps(result))
    assert nemesis_main(["--report-from", str(tmp_path / "result.json"), "--report", str(tmp_path)]) == 0
    text = _page(tmp_path, previous=None)
    assert "at 2026-11-26T01:02:03Z, carried over unchanged" in text
    assert "Seed 3, 5 rounds, 42 s, 2026-11-26T01:02:03Z" in _section(text, "## Nemesis")
    assert "Seed 8, 100 rounds" not in text  # the committed page's section was replaced, not kept beside it


def test_report_from_needs_a_report_directory(capsys):
    with pytest.raises(SystemExit):
        nemesis_main(["--report-from", "result.json"])
    assert "--report-from needs --report DIR" in capsys.readouterr().err


def test_the_machine_section_says_how_long_each_suite_ran(page):
    section = _section(page, "## Machine")
    timing = DOC["results"]["timing"]
    total = sum(t["seconds"] for t in timing.values())
    assert f"| run time | {total / 60:.0f} min: ledger {timing['ledger']['seconds']:.0f} s," in section
    assert "| load average (1 min) as each suite started | 5.9 |" in section
