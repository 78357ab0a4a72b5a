"""Load placement as a pure decision: even spread, overloaded brokers avoided, ties broken by rendezvous hashing."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from broker.loadbalance.broker_choice import (
    BundleStats, BundleStatsSampler, LoadReport, LoadSampler, PlacementWeights, TopicSample, choose_broker, load_score,
)


def _place_all(reports: dict[str, LoadReport], bundles: list[str]) -> dict[str, LoadReport]:
    """Place bundles one after another, each owner reporting its new bundle before the next lookup."""
    for bundle in bundles:
        chosen = choose_broker(reports, bundle)
        reports[chosen] = dataclasses.replace(reports[chosen], bundles=reports[chosen].bundles + (bundle,))
    return reports


def test_bundles_spread_evenly_over_three_idle_brokers():
    reports = _place_all({b: LoadReport() for b in ("a", "b", "c")}, [f"t/ns/{i}" for i in range(30)])
    assert sorted(len(r.bundles) for r in reports.values()) == [10, 10, 10]


def test_a_new_broker_takes_the_new_bundles_until_it_has_caught_up():
    reports = {"a": LoadReport(bundles=tuple(f"x{i}" for i in range(6))),
               "b": LoadReport(bundles=tuple(f"y{i}" for i in range(6))), "c": LoadReport()}
    _place_all(reports, [f"t/ns/{i}" for i in range(6)])
    assert [len(reports[b].bundles) for b in "abc"] == [6, 6, 6]


def test_an_overloaded_broker_gets_nothing_while_another_can_take_it():
    reports = {"a": LoadReport(), "b": LoadReport(), "hot": LoadReport(cpu_percent=95.0)}
    placed = _place_all(reports, [f"t/ns/{i}" for i in range(20)])
    assert placed["hot"].bundles == ()
    assert sorted(len(placed[b].bundles) for b in "ab") == [10, 10]


def test_when_every_broker_is_overloaded_the_least_loaded_still_gets_the_bundle():
    reports = {"a": LoadReport(cpu_percent=99.0, topics=50), "b": LoadReport(cpu_percent=90.0)}
    assert choose_broker(reports, "t/ns/0x0_0x1") == "b"


def test_message_rate_topics_and_cpu_count_against_a_broker():
    busy = {"a": LoadReport(msg_rate_in=20_000.0), "b": LoadReport(bundles=("t/ns/x",)), "c": LoadReport(topics=30)}
    placed = _place_all(busy, [f"t/ns/{i}" for i in range(12)])
    counts = {b: len(r.bundles) for b, r in placed.items()}
    assert counts["a"] < counts["c"] < counts["b"]


def test_pending_assignments_count_like_owned_bundles():
    reports = {"a": LoadReport(), "b": LoadReport()}
    first = choose_broker(reports, "t/ns/1")
    other = "b" if first == "a" else "a"
    assert choose_broker(reports, "t/ns/2", pending={first: 1}) == other


def test_brokers_deciding_from_the_same_stale_reports_spread_by_rendezvous():
    reports = {b: LoadReport() for b in ("a", "b", "c")}
    picks = collections.Counter(choose_broker(reports, f"t/ns/{i}") for i in range(60))
    assert set(picks) == {"a", "b", "c"} and min(picks.values()) >= 10
    assert all(choose_broker(reports, f"t/ns/{i}") == choose_broker(dict(reversed(reports.items())), f"t/ns/{i}")
               for i in range(20))  # deterministic, whatever the order the reports were read in


def test_weights_put_a_bundle_and_its_equivalents_on_one_scale():
    w = PlacementWeights()
    assert load_score(LoadReport(bundles=("x",)), weights=w) == pytest.approx(load_score(LoadReport(topics=10), weights=w))
    assert load_score(LoadReport(msg_rate_in=500, msg_rate_out=500)) == pytest.approx(1.0)
    assert load_score(LoadReport(), pending_bundles=2) == 2.0


def test_no_broker_is_an_error():
    with pytest.raises(ValueError, match="no live broker"):
        choose_broker({}, "t/ns/x")


def test_report_json_round_trips_in_pulsars_field_names():
    stats = BundleStats(topics=2, producers=1, consumers=3, msg_rate_in=5.0, msg_rate_out=6.0, throughput_in=50.0,
                        throughput_out=60.0)
    report = LoadReport(bundles=("t/ns/0x00000000_0x40000000",), topics=3, connections=2, msg_rate_in=1.5,
                        msg_rate_out=2.5, cpu_percent=12.0, bundle_stats={"t/ns/0x00000000_0x40000000": stats})
    doc = report.to_json()
    assert doc["numBundles"] == 1 and doc["numTopics"] == 3 and doc["cpu"] == {"usage": 12.0, "limit": 100.0}
    assert doc["lastStats"]["t/ns/0x00000000_0x40000000"] == {
        "topics": 2, "producerCount": 1, "consumerCount": 3, "msgRateIn": 5.0, "msgRateOut": 6.0,
        "msgThroughputIn": 50.0, "msgThroughputOut": 60.0}
    assert LoadReport.from_json(doc) == report
    assert LoadReport.from_json({"brokerId": "old"}) == LoadReport()  # a report without load fields


def test_sampler_turns_counters_and_cpu_time_into_rates():
    now, cpu = [100.0], [5.0]
    sampler = LoadSampler(clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    assert sampler.sample(1_000, 0) == (0.0, 0.0, 0.0)  # the first sample is the baseline
    now[0], cpu[0] = 102.0, 6.0
    assert sampler.sample(3_000, 400) == (1_000.0, 200.0, 50.0)
    now[0] = 104.0
    assert sampler.sample(10, 400) == (0.0, 0.0, 0.0)  # topics unloaded: totals dropped, rates do not go negative


def test_bundle_stats_sampler_sums_each_topics_own_change_per_bundle():
    now = [10.0]
    sampler = BundleStatsSampler(clock=lambda: now[0])

    def topic(name, bundle, msgs, producers=1, consumers=1):
        return TopicSample(name, bundle, msg_in=msgs, msg_out=2 * msgs, bytes_in=100 * msgs, bytes_out=200 * msgs,
                           producers=producers, consumers=consumers)

    first = sampler.sample([topic("t1", "a", 100), topic("t2", "a", 50, consumers=2), topic("t3", "b", 0)])
    assert first == {"a": BundleStats(topics=2, producers=2, consumers=3), "b": BundleStats(topics=1, producers=1,
                                                                                            consumers=1)}
    now[0] = 12.0
    # t1 +200, t2 moved to bundle "c" by a split (+100), t3 unloaded, t4 loaded since (+40, from zero).
    second = sampler.sample([topic("t1", "a", 300), topic("t2", "c", 150, consumers=2), topic("t4", "a", 40)])
    assert second["a"] == BundleStats(topics=2, producers=2, consumers=2, msg_rate_in=120.0, msg_rate_out=240.0,
                                      throughput_in=12_000.0, throughput_out=24_000.0)
    assert second["c"].msg_rate_in == 50.0 and second["c"].sessions == 3 and "b" not in second
    now[0] = 14.0
    # t1 reloaded (its counters started again): no negative rate.
    assert sampler.sample([topic("t1", "a", 10)])["a"].msg_rate == 0.0
