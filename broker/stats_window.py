"""Rates over a fixed window, sampled by a periodic task: what /metrics reports as "per second" and "last minute".

How it works: every ``stats_sample_interval_s`` the sampler reads each loaded
topic's and subscription's cumulative counters (messages and bytes in and
out, managed-ledger adds, reads, cache hits and misses, the add-latency and
entry-size buckets) into one vector per key and keeps the samples of the last
``stats_update_frequency_s`` (Pulsar's ``statsUpdateFrequencyInSecs``, 60 s).
A key's window is the span from its oldest kept sample to the newest: its
delta is newest minus oldest, its rate that delta over the span.

Scrapes only read what the last sample computed, so any number of scrapers
see the same figures: a scrape never moves the window (the old "since the
last scrape" rate let two Prometheus servers halve each other's rates).

A counter that went down (the topic was unloaded and loaded again, counting
from 0) counts from zero: the delta is its new value, as Prometheus's
``rate()`` treats a counter reset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Sequence

log = logging.getLogger(__name__)

Vector = tuple[float, ...]

# Topic vector: these fields, then the add-latency snapshot, then the entry-size snapshot (storage/managed_ledger/stats.py).
TOPIC_FIELDS = ("msg_in", "bytes_in", "msg_out", "bytes_out", "entries_added", "bytes_added", "entries_read",
                "add_errors", "cache_hits", "cache_misses", "cache_hit_bytes", "cache_miss_bytes", "cache_evictions")
SUBSCRIPTION_FIELDS = ("msg_out", "bytes_out", "redeliveries")


@dataclass(frozen=True)
class Delta:
    """What a key's counters grew by over ``span_s`` (0 with fewer than two samples: no rate yet)."""

    span_s: float
    values: Vector

    def rate(self, index: int) -> float:
        return self.values[index] / self.span_s if self.span_s > 0 else 0.0


def counter_delta(old: Sequence[float], new: Sequence[float]) -> Vector:
    """Component-wise growth; a component that went down was reset and counts from zero."""
    return tuple(n - o if n >= o else n for o, n in zip(old, new))


def window_deltas(samples: Sequence[tuple[float, Mapping[Hashable, Vector]]]) -> dict[Hashable, Delta]:
    """Each key of the newest sample: its growth from its oldest sample in ``samples`` (oldest first) to the newest.

    A key missing from an earlier sample appeared after it (a topic loaded, a subscription created) with its
    counters at zero: its window starts at that earlier sample, from zeros, so what it counted before its first
    sample is not lost.
    """
    if not samples:
        return {}
    newest_t, newest = samples[-1]
    out: dict[Hashable, Delta] = {}
    for key, value in newest.items():
        for i, (t, readings) in enumerate(samples):  # oldest first: the first sample holding the key starts its window
            old = readings.get(key)
            if old is not None and len(old) == len(value):
                if i > 0 and key not in samples[i - 1][1]:
                    out[key] = Delta(newest_t - samples[i - 1][0], counter_delta((0.0,) * len(value), value))
                else:
                    out[key] = Delta(newest_t - t, counter_delta(old, value))
                break
    return out


class CounterWindow:
    """Samples of cumulative counters over the last ``window_s``; ``sample`` recomputes, reads never change it."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic):
        if not window_s > 0:
            raise ValueError(f"the stats window must be > 0 seconds, got {window_s!r}")
        self.window_s = window_s
        self.clock = clock
        self._samples: deque[tuple[float, Mapping[Hashable, Vector]]] = deque()
        self._deltas: dict[Hashable, Delta] = {}
        self.samples_taken = 0

    def sample(self, readings: Mapping[Hashable, Vector]) -> None:
        """Add a sample of every key's counters; what scrapes read is recomputed here only.

        Memory: a vector that changed since the previous sample is kept as doubles (8 bytes a counter); one
        that did not (an idle topic) shares the previous sample's, so idle topics cost a dict slot a sample.
        """
        now = self.clock()
        previous = self._samples[-1][1] if self._samples else {}
        kept: dict[Hashable, Sequence[float]] = {}
        for key, vector in readings.items():
            before = previous.get(key)
            kept[key] = before if before is not None and before == _doubles(vector) else _doubles(vector)
        self._samples.append((now, kept))
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        self._deltas = window_deltas(self._samples)
        self.samples_taken += 1

    def delta(self, key: Hashable) -> Delta | None:
        return self._deltas.get(key)

    @property
    def span_s(self) -> float:
        """How much time the kept samples cover (up to the window)."""
        return self._samples[-1][0] - self._samples[0][0] if self._samples else 0.0


def _doubles(vector: Vector) -> array:
    return vector if isinstance(vector, array) else array("d", vector)


# ---- the broker's sampler: reads the topics, feeds two windows -----------------------------------------------


def topic_vector(topic) -> Vector:
    ml = topic.ml
    stats, meters = ml.stats, ml.meters
    return (topic.msg_in, topic.bytes_in, topic.msg_out, topic.bytes_out, stats["entries_added"],
            stats["bytes_added"], stats["entries_read"], meters.add_errors, stats["cache_hits"], stats["cache_misses"],
            meters.cache_hit_bytes, meters.cache_miss_bytes, ml.cache.evictions,
            *meters.add_latency_ms.snapshot(), *meters.entry_size.snapshot())


def subscription_vector(sub) -> Vector:
    return (sub.msg_out, sub.bytes_out, sum(c.redeliveries for c in sub.consumers))


class TopicStatsSampler:
    """The broker's two windows (topics by name, subscriptions by (topic, name)) and the task that samples them."""

    def __init__(self, service, clock: Callable[[], float] = time.monotonic):
        config = service.config
        self.service = service
        self.interval_s = config.stats_sample_interval_s
        self.topics = CounterWindow(config.stats_update_frequency_s, clock)
        self.subscriptions = CounterWindow(config.stats_update_frequency_s, clock)

    def sample_now(self) -> None:
        topics: dict[Hashable, Vector] = {}
        subs: dict[Hashable, Vector] = {}
        for name, topic in list(self.service.topics.items()):
            if getattr(topic, "ml", None) is None:
                continue
            topics[name] = topic_vector(topic)
            for sub_name, sub in list(topic.subscriptions.items()):
                subs[(name, sub_name)] = subscription_vector(sub)
        self.topics.sample(topics)
        self.subscriptions.sample(subs)

    @property
    def samples_taken(self) -> int:
        return self.topics.samples_taken

    def add_rates(self, name: str, stats: dict) -> dict:
        """Pulsar's rate fields of a topic's stats document (msgRateIn, msgThroughputIn, msgRateOut,
        msgThroughputOut; per subscription msgRateOut, msgThroughputOut, msgRateRedeliver), from the window."""
        topic = self.topics.delta(name) or Delta(0.0, ())
        for key, field in (("msgRateIn", "msg_in"), ("msgThroughputIn", "bytes_in"), ("msgRateOut", "msg_out"),
                           ("msgThroughputOut", "bytes_out")):
            stats[key] = topic.rate(TOPIC_FIELDS.index(field)) if topic.values else 0.0
        for sub_name, sub_stats in stats.get("subscriptions", {}).items():
            sub = self.subscriptions.delta((name, sub_name)) or Delta(0.0, ())
            for key, field in (("msgRateOut", "msg_out"), ("msgThroughputOut", "bytes_out"),
                               ("msgRateRedeliver", "redeliveries")):
                sub_stats[key] = sub.rate(SUBSCRIPTION_FIELDS.index(field)) if sub.values else 0.0
        return stats

    async def run(self) -> None:
        while True:
            try:
                self.sample_now()
            except Exception:  # a bug here must not stop the sampling for good; the next tick tries again
                log.exception("sampling topic stats failed")
            await asyncio.sleep(self.interval_s)  # a period, not synchronisation
