"""Which of a broker's bundles to split now: a pure decision from its bundles' stats (Pulsar's BundleSplitterTask).

Every ``load_balancer_split_interval_s`` the owner of bundles compares each
bundle's stats (broker/loadbalance/broker_choice.py ``BundleStats``: loaded topics, producers
plus consumers, msg/s in plus out, bytes/s in plus out) with the thresholds
below; a bundle over any of them is split at its midpoint through the same
path as ``PUT .../{bundle}/split`` (broker/ownership/ownership.py). As in Pulsar:

* a bundle with one topic is never split (both halves would keep the load);
* a threshold of 0 switches that criterion off;
* a namespace never grows beyond ``max_bundles`` bundles: splits planned in
  this round count, so a round that finds ten hot bundles in a namespace with
  room for three splits splits three (the most overloaded first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from broker.loadbalance.broker_choice import BundleStats

MB = 1024 * 1024


@dataclass(frozen=True)
class SplitThresholds:
    """Pulsar's loadBalancerNamespaceBundleMax* and loadBalancerNamespaceMaximumBundles, with its defaults."""

    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate: float = 30_000.0  # msg/s in + out
    max_bandwidth_mbytes: float = 100.0  # MB/s in + out
    max_bundles: int = 128  # per namespace


def overload(stats: BundleStats, limits: SplitThresholds) -> float:
    """How far over its worst threshold the bundle is (1.0 = at it); 0 when every criterion is switched off."""
    ratios = [0.0]
    for value, limit in ((stats.topics, limits.max_topics), (stats.sessions, limits.max_sessions),
                         (stats.msg_rate, limits.max_msg_rate), (stats.throughput / MB, limits.max_bandwidth_mbytes)):
        if limit > 0:
            ratios.append(value / limit)
    return max(ratios)


def bundles_to_split(stats: Mapping[str, BundleStats], bundle_counts: Mapping[str, int],
                     limits: SplitThresholds) -> list[str]:
    """The bundles (keys ``<tenant>/<ns>/0xLO_0xHI``) to split now, most overloaded first.

    ``stats``: the bundles this broker owns; ``bundle_counts``: how many bundles each namespace
    (``<tenant>/<ns>``) has now."""
    over = [(overload(s, limits), key) for key, s in stats.items() if s.topics > 1 and overload(s, limits) > 1.0]
    counts = dict(bundle_counts)
    chosen = []
    for _, key in sorted(over, key=lambda pair: (-pair[0], pair[1])):
        ns = key.rsplit("/", 1)[0]
        if counts.get(ns, 1) < limits.max_bundles:
            counts[ns] = counts.get(ns, 1) + 1
            chosen.append(key)
    return chosen
