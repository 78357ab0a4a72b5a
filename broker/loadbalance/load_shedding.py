"""Which bundles the leader unloads from overloaded brokers: a pure decision (Pulsar's ThresholdShedder, simplified).

Every ``load_balancer_shedding_interval_s`` the leader broker reads every
broker's load report and calls ``plan_shedding``:

1. A broker's *load* is a percentage: the larger of its CPU use (% of its one
   event-loop core) and its message rate (in + out) as a percentage of
   ``broker_max_msg_rate``. Pulsar takes the largest of CPU, memory, direct
   memory and NIC bandwidth as a share of their limits; a Python broker's
   limit is its event-loop core, and message rate stands in for bandwidth
   because a broker does not know its NIC's capacity.
2. A broker whose load is above the cluster's average by more than
   ``threshold_percent`` (Pulsar's loadBalancerBrokerThresholdShedderPercentage,
   10) scores a hit; only after ``hit_count_threshold`` consecutive hits
   (loadBalancerSheddingConditionHitCountThreshold, 3) is it shed, so one noisy
   CPU sample moves nothing.
3. It sheds the share of its message rate that would bring it down to
   average + threshold - 5 points, if its load is proportional to its traffic:
   ``rate * (load - avg - threshold + 5) / load``. A target below
   ``min_unload_msg_rate`` moves nothing (Pulsar's
   loadBalancerBundleUnloadMinThroughputThreshold, there in bytes/s): moving
   bundles costs the clients a reconnection and is not worth it for little traffic.
4. Bundles are taken busiest first until the target is met, skipping bundles
   without traffic, bundles unloaded less than ``grace_period_s`` ago
   (loadBalancerSheddingGracePeriodMinutes) and never taking a broker's last
   bundle.

The leader unloads each chosen bundle through its owner's graceful unload;
the next lookup of one of its topics places it (broker/loadbalance/broker_choice.py), which
prefers the less loaded brokers. Unlike Pulsar there is no history smoothing
of the usage (loadBalancerHistoryResourcePercentage): the hit count plays that role.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from broker.loadbalance.broker_choice import CPU_LIMIT_PERCENT, LoadReport

MARGIN_PERCENT = 5.0  # Pulsar's ThresholdShedder.ADDITIONAL_THRESHOLD_PERCENT_MARGIN


@dataclass(frozen=True)
class SheddingPolicy:
    threshold_percent: float = 10.0
    hit_count_threshold: int = 3
    grace_period_s: float = 1800.0
    min_unload_msg_rate: float = 1000.0  # msg/s in + out
    broker_max_msg_rate: float = 100_000.0  # msg/s in + out that count as 100 % load


@dataclass(frozen=True)
class SheddingPlan:
    unloads: tuple[tuple[str, str], ...] = ()  # (broker id, bundle key), in the order to unload
    hits: Mapping[str, int] = field(default_factory=dict)  # consecutive hits per broker, for the next round


def broker_load_percent(report: LoadReport, policy: SheddingPolicy) -> float:
    rate = report.msg_rate_in + report.msg_rate_out
    return max(report.cpu_percent * 100.0 / CPU_LIMIT_PERCENT, 100.0 * rate / policy.broker_max_msg_rate)


def plan_shedding(reports: Mapping[str, LoadReport], hits: Mapping[str, int], unloaded_at: Mapping[str, float],
                  now: float, policy: SheddingPolicy) -> SheddingPlan:
    """What to unload now. ``hits``: the previous plan's; ``unloaded_at``: when each bundle key was last unloaded
    by a shedder (same clock as ``now``)."""
    if len(reports) < 2:
        return SheddingPlan()
    loads = {broker: broker_load_percent(r, policy) for broker, r in reports.items()}
    average = sum(loads.values()) / len(loads)
    new_hits: dict[str, int] = {}
    unloads: list[tuple[str, str]] = []
    for broker in sorted(loads, key=lambda b: (-loads[b], b)):
        load = loads[broker]
        if load <= average + policy.threshold_percent:
            continue
        new_hits[broker] = hits.get(broker, 0) + 1
        if new_hits[broker] < policy.hit_count_threshold:
            continue
        chosen = _bundles_to_shed(reports[broker], load, average, unloaded_at, now, policy)
        if chosen:
            unloads.extend((broker, bundle) for bundle in chosen)
            new_hits[broker] = 0
    return SheddingPlan(tuple(unloads), new_hits)


def _bundles_to_shed(report: LoadReport, load: float, average: float, unloaded_at: Mapping[str, float], now: float,
                     policy: SheddingPolicy) -> list[str]:
    rates = {b: report.bundle_stats[b].msg_rate for b in report.bundles if b in report.bundle_stats}
    target = sum(rates.values()) * (load - average - policy.threshold_percent + MARGIN_PERCENT) / load
    if target < policy.min_unload_msg_rate or len(report.bundles) < 2:
        return []
    candidates = sorted((b for b, rate in rates.items()
                         if rate > 0 and now - unloaded_at.get(b, float("-inf")) >= policy.grace_period_s),
                        key=lambda b: (-rates[b], b))
    chosen: list[str] = []
    shed = 0.0
    for bundle in candidates:
        if shed >= target or len(chosen) == len(report.bundles) - 1:
            break
        chosen.append(bundle)
        shed += rates[bundle]
    return chosen
