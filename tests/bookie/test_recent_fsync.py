"""The bookie's recent journal fsync latency (what /api/v1/bookie/info and the operator console show): the
last RECENT_FSYNCS syncs only, as percentiles in milliseconds."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from storage.bookie.metrics import RECENT_FSYNCS, BookieMetrics


def test_no_sync_yet_says_none():
    assert BookieMetrics(CollectorRegistry()).recent_fsync_ms() == {"count": 0, "p50_ms": None, "p99_ms": None,
                                                                   "max_ms": None}


def test_percentiles_cover_only_the_latest_syncs():
    metrics = BookieMetrics(CollectorRegistry())
    metrics.observe_group(1, 100, 5.0)  # one slow sync long ago, pushed out by the next RECENT_FSYNCS
    for i in range(RECENT_FSYNCS):
        metrics.observe_group(1, 100, 0.001 if i % 100 else 0.010)
    recent = metrics.recent_fsync_ms()
    assert recent["count"] == RECENT_FSYNCS
    assert recent["p50_ms"] == 1.0 and recent["p99_ms"] == 10.0 and recent["max_ms"] == 10.0
