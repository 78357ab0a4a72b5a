"""journalSyncData against a real `broker standalone` and the official client: the default bookies fdatasync their
journals; with ``journalSyncData=false`` (a Pulsar file, or the environment) they write but never fsync, and the
messages are still stored and served. Counted by each bookie's own fsync histogram, scraped over HTTP."""

from __future__ import annotations

import re
import urllib.request

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from storage.testing.processes import BrokerProcess

# Single-process: "bookie ID serving (..., metrics http://H:P/metrics; ...)"; multi-process, a child's ready line
# relayed: "[bookie-a] bookie ID serving (...; http H:P; ...)".
BOOKIE_HTTP = re.compile(r"bookie (standalone-bookie-\w) serving \(.*?(?:metrics http://|http )([\d.]+:\d+)")
MESSAGES = 200


def bookie_metrics(broker: BrokerProcess) -> dict[str, dict[str, float]]:
    """bookie id -> {sample name: value} for the journal's fsync count and bytes written."""
    found = {}
    for bookie_id, address in BOOKIE_HTTP.findall(broker.log_path.read_text()):
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=15) as resp:
            text = resp.read().decode()
        found[bookie_id] = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
                            if s.name in ("bookie_journal_fsync_latency_seconds_count",
                                          "bookie_journal_written_bytes_total")}
    assert sorted(found) == ["standalone-bookie-a", "standalone-bookie-b", "standalone-bookie-c"], found
    return found


def produce_and_read_back(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(b"m-%d" % i)
        got = []
        for _ in range(MESSAGES):
            msg = consumer.receive(timeout_millis=15_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [b"m-%d" % i for i in range(MESSAGES)]
    finally:
        client.close()


def run(broker: BrokerProcess) -> dict[str, dict[str, float]]:
    broker.start(timeout_s=90)
    try:
        produce_and_read_back(broker, "persistent://public/default/journal-sync-data")
        metrics = bookie_metrics(broker)
        warned = "may lose acknowledged messages" in broker.log_path.read_text()
        unsynced = [m["bookie_journal_fsync_latency_seconds_count"] == 0 for m in metrics.values()
                    if m["bookie_journal_written_bytes_total"] > 0]
        assert warned == any(unsynced)  # the standalone says so at start when it will not fsync
        return metrics
    finally:
        broker.stop()


def journals_wrote(metrics: dict[str, dict[str, float]]) -> int:
    """How many bookies took adds (E2/Qw2 over three: at least two)."""
    return sum(1 for m in metrics.values() if m["bookie_journal_written_bytes_total"] > 0)


@pytest.mark.parametrize("workers", [None, 1], ids=["single-process", "multi-process"])
def test_the_default_standalone_fsyncs_its_journals(tmp_path, workers):
    metrics = run(BrokerProcess(tmp_path / "data", workers=workers))
    assert journals_wrote(metrics) >= 2
    for m in metrics.values():
        if m["bookie_journal_written_bytes_total"] > 0:
            assert m["bookie_journal_fsync_latency_seconds_count"] > 0


def test_journal_sync_data_false_in_a_pulsar_file_turns_the_fsync_off(tmp_path):
    conf = tmp_path / "standalone.conf"
    conf.write_text("journalSyncData=false\n")
    metrics = run(BrokerProcess(tmp_path / "data", workers=1, extra_args=["--config", str(conf)]))
    assert journals_wrote(metrics) >= 2
    assert [m["bookie_journal_fsync_latency_seconds_count"] for m in metrics.values()] == [0, 0, 0]


def test_journal_sync_data_false_in_the_environment_turns_the_fsync_off(tmp_path):
    metrics = run(BrokerProcess(tmp_path / "data", env={"MAGNETAR_BROKER_JOURNAL_SYNC_DATA": "false"}))
    assert journals_wrote(metrics) >= 2
    assert [m["bookie_journal_fsync_latency_seconds_count"] for m in metrics.values()] == [0, 0, 0]
