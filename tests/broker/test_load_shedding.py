"""The load-shedding decision as a table: who is over average + threshold, for how many rounds, which bundles go."""

from __future__ import annotations

import pytest

from broker.loadbalance.broker_choice import BundleStats, LoadReport
from broker.loadbalance.load_shedding import SheddingPolicy, broker_load_percent, plan_shedding

POLICY = SheddingPolicy(threshold_percent=10.0, hit_count_threshold=1, grace_period_s=100.0,
                        min_unload_msg_rate=10.0, broker_max_msg_rate=1000.0)


def broker(cpu: float = 0.0, **bundle_rates: float) -> LoadReport:
    """A broker with the given CPU % and bundles (named by keyword) carrying those msg/s in; its rate is their sum."""
    stats = {b: BundleStats(topics=1, msg_rate_in=rate) for b, rate in bundle_rates.items()}
    return LoadReport(bundles=tuple(sorted(bundle_rates)), msg_rate_in=sum(bundle_rates.values()), cpu_percent=cpu,
                      bundle_stats=stats)


def unloads(reports, policy=POLICY, hits=None, unloaded_at=None, now=1000.0):
    return list(plan_shedding(reports, hits or {}, unloaded_at or {}, now, policy).unloads)


def test_load_is_the_larger_of_cpu_and_message_rate_against_capacity():
    assert broker_load_percent(broker(cpu=30.0, a=100.0), POLICY) == 30.0
    assert broker_load_percent(broker(cpu=5.0, a=400.0, b=100.0), POLICY) == 50.0
    assert broker_load_percent(LoadReport(msg_rate_out=2000.0), POLICY) == 200.0  # over capacity is over 100 %


@pytest.mark.parametrize("reports, expected", [
    # Balanced: nobody above average + 10.
    ({"x": broker(cpu=50, a=100, b=100), "y": broker(cpu=45, c=100, d=100)}, []),
    # x at 80 %, average 40: shed (80 - 40 - 10 + 5) / 80 = 44 % of its 400 msg/s = 175 msg/s, busiest first.
    ({"x": broker(a=300, b=50, c=30, d=20), "y": broker()}, [("x", "a")]),
    ({"x": broker(a=100, b=100, c=100, d=100), "y": broker()}, [("x", "a"), ("x", "b")]),
    # The last bundle always stays, however hot.
    ({"x": broker(a=800), "y": broker()}, []),
    ({"x": broker(a=500, b=400), "y": broker()}, [("x", "a")]),
    # Idle bundles are not worth a move.
    ({"x": broker(cpu=90, a=0, b=0, c=0), "y": broker()}, []),
    # A CPU-bound broker sheds a share of its traffic: load 90, average 45, shed 50/90 of 300 msg/s.
    ({"x": broker(cpu=90, a=100, b=100, c=100), "y": broker()}, [("x", "a"), ("x", "b")]),
    # Three brokers: only the one over average + threshold sheds.
    ({"x": broker(a=300, b=300), "y": broker(c=200, d=200), "z": broker(e=10)}, [("x", "a")]),
    ({"x": broker(a=300, b=300), "y": broker(c=300, d=250), "z": broker(e=10)}, [("x", "a"), ("y", "c")]),
    # A lone broker has nobody to shed to.
    ({"x": broker(a=900, b=900)}, []),
], ids=["balanced", "one-busy-bundle", "even-bundles", "only-bundle", "keeps-one", "idle-bundles", "cpu-bound",
        "three-brokers", "two-of-three", "alone"])
def test_which_bundles_are_unloaded(reports, expected):
    assert unloads(reports) == expected


def test_a_target_below_the_minimum_rate_moves_nothing():
    reports = {"x": broker(cpu=90, a=3, b=3), "y": broker()}
    assert unloads(reports) == []
    assert unloads(reports, SheddingPolicy(threshold_percent=10.0, hit_count_threshold=1, min_unload_msg_rate=1.0)) \
        == [("x", "a")]


def test_a_broker_is_shed_only_after_consecutive_hits():
    policy = SheddingPolicy(threshold_percent=10.0, hit_count_threshold=3, min_unload_msg_rate=10.0,
                            broker_max_msg_rate=1000.0)
    hot = {"x": broker(a=300, b=300), "y": broker()}
    cool = {"x": broker(a=10, b=10), "y": broker(c=10)}
    plan = plan_shedding(hot, {}, {}, 0.0, policy)
    assert plan.unloads == () and plan.hits == {"x": 1}
    plan = plan_shedding(hot, plan.hits, {}, 1.0, policy)
    assert plan.unloads == () and plan.hits == {"x": 2}
    assert plan_shedding(cool, plan.hits, {}, 2.0, policy).hits == {}  # one calm round starts the count again
    plan = plan_shedding(hot, plan.hits, {}, 2.0, policy)
    assert plan.unloads == (("x", "a"),) and plan.hits == {"x": 0}  # and after shedding


def test_bundles_unloaded_within_the_grace_period_stay():
    reports = {"x": broker(a=300, b=200, c=100), "y": broker()}
    # Target 250 msg/s of 600: without "a", it takes "b" and "c".
    assert unloads(reports, unloaded_at={"a": 950.0}, now=1000.0) == [("x", "b"), ("x", "c")]
    assert unloads(reports, unloaded_at={"a": 900.0}, now=1000.0) == [("x", "a")]  # 100 s ago: eligible again
    assert unloads(reports, unloaded_at={"a": 950.0, "b": 950.0, "c": 950.0}) == []


def test_a_busy_bundle_reported_without_stats_is_not_chosen():
    report = LoadReport(bundles=("a", "b"), msg_rate_in=600.0, bundle_stats={"b": BundleStats(msg_rate_in=600.0)})
    assert unloads({"x": report, "y": broker()}) == [("x", "b")]
