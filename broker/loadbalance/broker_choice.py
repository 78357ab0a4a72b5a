"""Which live broker takes an unowned bundle: a pure decision from the brokers' load reports.

Every broker keeps an ephemeral ``/loadbalance/brokers/<id>`` node with its
``LoadReport`` (bundles owned, topics, message rates, CPU), rewritten when its
bundles change and every ``load_report_interval_s``. The broker answering a
lookup for an unowned bundle calls ``choose_broker``:

* brokers at or above ``overloaded_cpu_percent`` of their one event-loop core
  are left out, unless every broker is;
* the rest are ranked by ``load_score``: owned bundles (plus bundles this
  broker has just sent their way that their report does not show yet, Pulsar's
  "pre-allocated" bundles), topics, message rate and CPU, each weighted;
* equal scores are broken by rendezvous hashing of (bundle, broker), so
  brokers deciding at the same moment from the same reports spread the
  bundles instead of all picking the same broker.

``LoadSampler`` turns the broker's message counters and its process CPU time
into rates between two samples, and ``BundleStatsSampler`` its topics'
counters into per-bundle stats (Pulsar's ``lastStats``, which the automatic
split and the load shedder read); their clocks are injected.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

CPU_LIMIT_PERCENT = 100.0  # one asyncio event loop uses at most one core


@dataclass(frozen=True)
class BundleStats:
    """One bundle's load on its owner (Pulsar's NamespaceBundleStats): loaded topics, their producers and
    consumers, and rates since the previous sample."""

    topics: int = 0
    producers: int = 0
    consumers: int = 0
    msg_rate_in: float = 0.0  # messages/s
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0  # bytes/s
    throughput_out: float = 0.0

    @property
    def sessions(self) -> int:
        return self.producers + self.consumers

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out

    def to_json(self) -> dict:
        return {"topics": self.topics, "producerCount": self.producers, "consumerCount": self.consumers,
                "msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
                "msgThroughputIn": self.throughput_in, "msgThroughputOut": self.throughput_out}

    @classmethod
    def from_json(cls, doc: dict) -> "BundleStats":
        return cls(int(doc.get("topics", 0)), int(doc.get("producerCount", 0)), int(doc.get("consumerCount", 0)),
                   float(doc.get("msgRateIn", 0.0)), float(doc.get("msgRateOut", 0.0)),
                   float(doc.get("msgThroughputIn", 0.0)), float(doc.get("msgThroughputOut", 0.0)))


@dataclass(frozen=True)
class LoadReport:
    bundles: tuple[str, ...] = ()  # "<tenant>/<ns>/0xLO_0xHI" owned by the broker
    topics: int = 0
    connections: int = 0
    msg_rate_in: float = 0.0  # messages/s
    msg_rate_out: float = 0.0
    cpu_percent: float = 0.0  # of one core, since the previous sample
    bundle_stats: Mapping[str, BundleStats] = field(default_factory=dict)  # by bundle key, owned bundles only

    def to_json(self) -> dict:
        """Field names of Pulsar's LocalBrokerData where it has one."""
        return {"bundles": list(self.bundles), "numBundles": len(self.bundles), "numTopics": self.topics,
                "numConnections": self.connections, "msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
                "cpu": {"usage": self.cpu_percent, "limit": CPU_LIMIT_PERCENT},
                "lastStats": {k: s.to_json() for k, s in sorted(self.bundle_stats.items())}}

    @classmethod
    def from_json(cls, doc: dict) -> "LoadReport":
        return cls(tuple(doc.get("bundles", ())), int(doc.get("numTopics", 0)), int(doc.get("numConnections", 0)),
                   float(doc.get("msgRateIn", 0.0)), float(doc.get("msgRateOut", 0.0)),
                   float(doc.get("cpu", {}).get("usage", 0.0)),
                   {k: BundleStats.from_json(v) for k, v in doc.get("lastStats", {}).items()})


@dataclass(frozen=True)
class PlacementWeights:
    """What one unit of each measure weighs, in bundles: by default 10 topics, 1,000 msg/s or 10 % CPU ~ 1 bundle."""

    bundle: float = 1.0
    topic: float = 0.1
    msg_rate: float = 0.001
    cpu_percent: float = 0.1
    overloaded_cpu_percent: float = 85.0


DEFAULT_WEIGHTS = PlacementWeights()


def load_score(report: LoadReport, pending_bundles: int = 0, weights: PlacementWeights = DEFAULT_WEIGHTS) -> float:
    return ((len(report.bundles) + pending_bundles) * weights.bundle + report.topics * weights.topic
            + (report.msg_rate_in + report.msg_rate_out) * weights.msg_rate + report.cpu_percent * weights.cpu_percent)


def _rendezvous(bundle: str, broker_id: str) -> bytes:
    # Not CRC32: it is linear, so the order of two brokers' CRCs would hardly depend on the bundle.
    return hashlib.blake2b(f"{bundle}|{broker_id}".encode(), digest_size=8).digest()


def choose_broker(reports: Mapping[str, LoadReport], bundle: str, pending: Mapping[str, int] | None = None,
                  weights: PlacementWeights = DEFAULT_WEIGHTS) -> str:
    """The id of the broker that should own ``bundle``. ``pending``: bundles per broker already assigned but not
    yet in its report. Raises ValueError when there is no broker."""
    if not reports:
        raise ValueError("no live broker to place a bundle on")
    pending = pending or {}
    healthy = [b for b, r in reports.items() if r.cpu_percent < weights.overloaded_cpu_percent] or list(reports)
    return min(healthy, key=lambda b: (round(load_score(reports[b], pending.get(b, 0), weights), 6),
                                       _rendezvous(bundle, b)))


@dataclass
class LoadSampler:
    """Message rates and CPU use between consecutive ``sample`` calls (the first call only sets the baseline)."""

    clock: Callable[[], float] = time.monotonic
    cpu_clock: Callable[[], float] = time.process_time
    _last: tuple[float, float, int, int] | None = field(default=None, init=False)

    def sample(self, msg_in_total: int, msg_out_total: int) -> tuple[float, float, float]:
        """(msg/s in, msg/s out, CPU % of one core). Totals may drop when topics unload: rates never go negative."""
        now, cpu = self.clock(), self.cpu_clock()
        last, self._last = self._last, (now, cpu, msg_in_total, msg_out_total)
        if last is None or now <= last[0]:
            return 0.0, 0.0, 0.0
        elapsed = now - last[0]
        return (max(msg_in_total - last[2], 0) / elapsed, max(msg_out_total - last[3], 0) / elapsed,
                100.0 * max(cpu - last[1], 0.0) / elapsed)


@dataclass(frozen=True)
class TopicSample:
    """What ``BundleStatsSampler`` needs of one loaded topic: its bundle, its counters since it loaded, its clients."""

    topic: str
    bundle: str  # bundle key, "<tenant>/<ns>/0xLO_0xHI"
    msg_in: int
    msg_out: int
    bytes_in: int
    bytes_out: int
    producers: int
    consumers: int


@dataclass
class BundleStatsSampler:
    """Per-bundle stats between consecutive ``sample`` calls. Rates are per topic, so a topic that loads, unloads
    or moves to another bundle (a split) between two samples counts only its own change; a topic new since the
    previous sample counts from zero (its counters start at zero when it loads)."""

    clock: Callable[[], float] = time.monotonic
    _last: tuple[float, dict[str, tuple[int, int, int, int]]] | None = field(default=None, init=False)

    def sample(self, topics: list[TopicSample]) -> dict[str, BundleStats]:
        now = self.clock()
        last_time, last = self._last if self._last is not None else (None, {})
        self._last = (now, {t.topic: (t.msg_in, t.msg_out, t.bytes_in, t.bytes_out) for t in topics})
        elapsed = None if last_time is None or now <= last_time else now - last_time
        acc: dict[str, list[float]] = {}
        for t in topics:
            row = acc.setdefault(t.bundle, [0, 0, 0, 0.0, 0.0, 0.0, 0.0])
            row[0] += 1
            row[1] += t.producers
            row[2] += t.consumers
            if elapsed is not None:
                before = last.get(t.topic, (0, 0, 0, 0))
                for i, (now_count, then) in enumerate(zip((t.msg_in, t.msg_out, t.bytes_in, t.bytes_out), before)):
                    row[3 + i] += max(now_count - then, 0) / elapsed
        return {bundle: BundleStats(int(r[0]), int(r[1]), int(r[2]), *r[3:]) for bundle, r in acc.items()}
