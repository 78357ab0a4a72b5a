"""journal_sync_data (BookKeeper's journalSyncData): on by default, every group is fdatasync'd before its adds are
acknowledged; off, a group is acknowledged once written to the OS. The standalone takes it from the broker config's
``journalSyncData``. Real processes: tests/official_client/test_journal_sync_data.py."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from broker.config import BrokerConfig
from broker.pulsar_conf import broker_fields, parse_properties
from broker.standalone import standalone_bookie_configs
from storage.bookie.config import BookieConfig
from storage.bookie.journal import ADD, Journal, JournalRecord
from storage.bookie.metrics import BookieMetrics

DEADLINE_S = 10.0


async def _write_through(tmp_path, **changes) -> tuple[list[int], list[tuple], list[JournalRecord]]:
    """Append 20 records, close, replay: (fds fsync'd, observed groups, records replayed from the files)."""
    config = BookieConfig(metadata_store_url="mem://", data_dir=tmp_path, journal_flush_when_queue_empty=True,
                          **changes)
    config.journal_dir.mkdir(parents=True)
    synced: list[int] = []
    groups: list[tuple] = []
    journal = Journal(config.journal_dir, config, fsync=synced.append,
                      observe_group=lambda *group: groups.append(group))
    applied: list[JournalRecord] = []
    journal.start(asyncio.get_running_loop(), applied.extend)
    written = [JournalRecord(ADD, 3, i, b"entry-%d" % i) for i in range(20)]
    await asyncio.wait_for(asyncio.gather(*(journal.append(r) for r in written)), DEADLINE_S)
    assert applied == written  # acknowledged and applied either way
    await journal.close()
    return synced, groups, list(Journal(config.journal_dir, config).replay(None))


async def test_the_default_fsyncs_every_group_before_acknowledging(tmp_path):
    synced, groups, replayed = await _write_through(tmp_path)
    assert synced and len(synced) == len(groups)
    assert all(isinstance(fsync_s, float) for _records, _bytes, fsync_s in groups)
    assert [r.entry_id for r in replayed] == list(range(20))


async def test_sync_data_off_writes_and_acknowledges_without_fsync(tmp_path):
    synced, groups, replayed = await _write_through(tmp_path, journal_sync_data=False)
    assert synced == []
    assert groups and all(fsync_s is None for _records, _bytes, fsync_s in groups)
    assert sum(records for records, _bytes, _fsync in groups) == 20
    assert [r.entry_id for r in replayed] == list(range(20))  # still written, replayable after a clean stop


def test_a_group_without_fsync_is_not_counted_as_an_fsync():
    metrics = BookieMetrics(registry := CollectorRegistry())
    metrics.observe_group(4, 400, None)
    metrics.observe_group(2, 200, 0.001)
    assert registry.get_sample_value("bookie_journal_fsync_latency_seconds_count") == 1
    assert registry.get_sample_value("bookie_journal_group_size_records_count") == 2
    assert registry.get_sample_value("bookie_journal_written_bytes_total") == 600
    assert metrics.recent_fsync_ms()["count"] == 1


@pytest.mark.parametrize("text, expected", [("", True), ("journalSyncData=false\n", False),
                                            ("journalSyncData=true\n", True), ("journalSyncData=\n", True)])
def test_journal_sync_data_from_a_pulsar_file_reaches_the_standalone_bookies(tmp_path, text, expected):
    settings = broker_fields(parse_properties(text))
    assert settings.unknown == ()
    config = BrokerConfig(metadata_store_url="memory://x", **settings.values)
    assert config.journal_sync_data is expected
    bookies = standalone_bookie_configs(tmp_path, "memory://x", 3181, journal_sync_data=config.journal_sync_data)
    assert [b.journal_sync_data for b in bookies] == [expected] * 3


def test_a_bad_journal_sync_data_value_is_refused():
    with pytest.raises(ValueError, match="journalSyncData"):
        broker_fields(parse_properties("journalSyncData=sometimes\n"))
