"""The automatic split decision as a table: which owned bundles are over a threshold, bounded per namespace."""

from __future__ import annotations

import pytest

from broker.loadbalance.auto_split import MB, SplitThresholds, bundles_to_split, overload
from broker.loadbalance.broker_choice import BundleStats

LIMITS = SplitThresholds(max_topics=10, max_sessions=20, max_msg_rate=1000.0, max_bandwidth_mbytes=1.0, max_bundles=6)
A, B, C = "t/ns/0x00000000_0x40000000", "t/ns/0x40000000_0x80000000", "t/ns/0x80000000_0xc0000000"
OTHER = "t/other/0x00000000_0xffffffff"


@pytest.mark.parametrize("stats, expected", [
    (BundleStats(topics=10), []),  # at a threshold is not over it
    (BundleStats(topics=11), [A]),
    (BundleStats(topics=2, producers=11, consumers=10), [A]),  # sessions = producers + consumers
    (BundleStats(topics=2, producers=10, consumers=10), []),
    (BundleStats(topics=2, msg_rate_in=600.0, msg_rate_out=401.0), [A]),  # msg rate = in + out
    (BundleStats(topics=2, msg_rate_in=1000.0), []),
    (BundleStats(topics=2, throughput_in=0.5 * MB, throughput_out=0.6 * MB), [A]),  # bandwidth = in + out, MB/s
    (BundleStats(topics=2, throughput_in=1.0 * MB), []),
    (BundleStats(topics=1, producers=500, msg_rate_in=1e6, throughput_in=1e9), []),  # one topic: a split cannot help
    (BundleStats(), []),
], ids=["topics-at", "topics-over", "sessions-over", "sessions-at", "rate-over", "rate-at", "bandwidth-over",
        "bandwidth-at", "single-topic", "idle"])
def test_a_bundle_splits_only_when_over_a_threshold_and_with_more_than_one_topic(stats, expected):
    assert bundles_to_split({A: stats}, {"t/ns": 4}, LIMITS) == expected


def test_a_zero_threshold_switches_that_criterion_off():
    off = SplitThresholds(max_topics=0, max_sessions=0, max_msg_rate=0, max_bandwidth_mbytes=0, max_bundles=128)
    hot = BundleStats(topics=10_000, producers=10_000, msg_rate_in=1e9, throughput_in=1e12)
    assert overload(hot, off) == 0.0
    assert bundles_to_split({A: hot}, {"t/ns": 4}, off) == []
    only_topics = SplitThresholds(max_topics=5, max_sessions=0, max_msg_rate=0, max_bandwidth_mbytes=0)
    assert bundles_to_split({A: BundleStats(topics=6)}, {"t/ns": 4}, only_topics) == [A]


def test_the_most_overloaded_split_first_and_a_namespace_never_exceeds_its_maximum():
    stats = {A: BundleStats(topics=12), B: BundleStats(topics=30), C: BundleStats(topics=20)}
    assert bundles_to_split(stats, {"t/ns": 4}, LIMITS) == [B, C]  # room for two more bundles: 4 -> 6
    assert bundles_to_split(stats, {"t/ns": 3}, LIMITS) == [B, C, A]
    assert bundles_to_split(stats, {"t/ns": 6}, LIMITS) == []


def test_the_maximum_counts_per_namespace():
    stats = {A: BundleStats(topics=12), OTHER: BundleStats(topics=11)}
    assert bundles_to_split(stats, {"t/ns": 6, "t/other": 1}, LIMITS) == [OTHER]
