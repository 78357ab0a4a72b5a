"""Rate accounting for Pulsar's publish-rate and dispatch-rate policies: pure, with the clock injected.

How it works: a ``Rate`` is a quota of messages and/or bytes per period
(Pulsar's ``ratePeriodInSecond``; publish rates are per second). A
``RateLimiter`` counts what passed in the current period. A single SEND or
read can carry the count past the quota (it is not split), so usage beyond
the quota is carried into the next periods as debt: each period that passes
pays off one quota. The long-run rate therefore never exceeds the quota,
and a burst that overshot is followed by correspondingly longer pauses. A
period begins with the first use after an idle one (nothing counted in it).

Callers ask ``exhausted()`` (stop now?), ``available()`` (how much may still
pass this period) and ``resume_at()`` (when there is room again). The I/O that
pauses producers' connections and dispatchers lives in broker/topics/throttling.py.

A quota of 0 or -1 means "no limit on that dimension", as in Pulsar. A
dispatch rate ``relative_to_publish_rate`` adds the topic's recent publish
rate (measured by a ``RateMeter``) to its quota, as Pulsar does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping

Clock = Callable[[], float]


@dataclass(frozen=True)
class Rate:
    """Up to ``messages`` and ``byte_count`` per ``period_s`` seconds; a quota <= 0 is no limit on that dimension."""

    messages: int = -1
    byte_count: int = -1
    period_s: float = 1.0
    relative_to_publish_rate: bool = False

    def __post_init__(self):
        if not self.period_s > 0:
            raise ValueError(f"a rate period must be > 0 seconds, got {self.period_s!r}")

    @property
    def limited(self) -> bool:
        return self.messages > 0 or self.byte_count > 0


UNLIMITED = Rate()


class RateMeter:
    """The rate over the last whole second: what ``relative_to_publish_rate`` adds to a dispatch quota."""

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self._start = clock()
        self._messages = self._bytes = 0
        self._last = (0.0, 0.0)

    def record(self, messages: int, nbytes: int) -> None:
        self._roll()
        self._messages += messages
        self._bytes += nbytes

    def rate(self) -> tuple[float, float]:
        """(messages/s, bytes/s) in the last completed second (0 when nothing was recorded then)."""
        self._roll()
        return self._last

    def _roll(self) -> None:
        elapsed = self.clock() - self._start
        if elapsed < 1.0:
            return
        whole = math.floor(elapsed)
        # A second with nothing in it in between makes the last rate 0, not the stale one before it.
        self._last = (self._messages, self._bytes) if whole == 1 else (0.0, 0.0)
        self._start += whole
        self._messages = self._bytes = 0


class RateLimiter:
    """Counts messages and bytes against a ``Rate``, period by period, carrying an overshoot into later periods.

    ``extra`` (for ``relative_to_publish_rate``) returns (messages/s, bytes/s) to add to the quota."""

    def __init__(self, rate: Rate, clock: Clock = time.monotonic,
                 extra: Callable[[], tuple[float, float]] | None = None):
        self.rate = rate
        self.clock = clock
        self.extra = extra
        self._period_start = clock()
        self.used_messages = 0
        self.used_bytes = 0

    def quota(self) -> tuple[int, int]:
        """This period's (messages, bytes) quota; <= 0 for a dimension without a limit."""
        m, b = self.rate.messages, self.rate.byte_count
        if self.rate.relative_to_publish_rate and self.extra is not None:
            em, eb = self.extra()
            m = m + int(em * self.rate.period_s) if m > 0 else m
            b = b + int(eb * self.rate.period_s) if b > 0 else b
        return m, b

    def update(self, rate: Rate) -> None:
        """A new rate applies from now on; usage (and debt) counted so far is kept."""
        if rate.period_s != self.rate.period_s:
            self._roll()
            self._period_start = self.clock()
        self.rate = rate

    def record(self, messages: int, nbytes: int) -> None:
        self._roll()
        if self.used_messages == 0 and self.used_bytes == 0:
            # A period begins with the first use after an idle stretch, so the first N of a burst and each N
            # after them are a period apart, wherever the burst starts.
            self._period_start = self.clock()
        self.used_messages += messages
        self.used_bytes += nbytes

    def exhausted(self) -> bool:
        """Nothing more may pass in this period."""
        self._roll()
        m, b = self.quota()
        return (m > 0 and self.used_messages >= m) or (b > 0 and self.used_bytes >= b)

    def available(self) -> tuple[int | None, int | None]:
        """What may still pass this period: (messages, bytes), None for a dimension without a limit."""
        self._roll()
        m, b = self.quota()
        return (max(0, m - self.used_messages) if m > 0 else None,
                max(0, b - self.used_bytes) if b > 0 else None)

    def resume_at(self) -> float:
        """The clock time at which the limiter has room again (now, when it has room already)."""
        self._roll()
        m, b = self.quota()
        periods = 0
        for used, q in ((self.used_messages, m), (self.used_bytes, b)):
            if q > 0 and used >= q:
                periods = max(periods, used // q)  # periods until the debt is below one quota
        return self.clock() if periods == 0 else self._period_start + periods * self.rate.period_s

    def _roll(self) -> None:
        now = self.clock()
        if now < self._period_start + self.rate.period_s:
            return
        elapsed = int((now - self._period_start) // self.rate.period_s)
        self._period_start += elapsed * self.rate.period_s
        m, b = self.quota()
        self.used_messages = max(0, self.used_messages - elapsed * m) if m > 0 else 0
        self.used_bytes = max(0, self.used_bytes - elapsed * b) if b > 0 else 0


def tightest(available: list[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """The smallest allowance per dimension among several limiters' ``available()`` (None: no limit)."""
    messages = [m for m, _ in available if m is not None]
    nbytes = [b for _, b in available if b is not None]
    return (min(messages) if messages else None, min(nbytes) if nbytes else None)


def entries_allowed(count: int, allowance: tuple[int | None, int | None], avg_entry_bytes: float) -> int:
    """How many of ``count`` entries to read under an allowance: at most the messages left (one entry is at least
    one message) and the bytes left at the recent average entry size; at least 1, since the caller reads only when
    the allowance is not used up, and an overshoot is carried as debt."""
    messages, nbytes = allowance
    if messages is not None:
        count = min(count, messages)
    if nbytes is not None and avg_entry_bytes > 0:
        count = min(count, int(nbytes // avg_entry_bytes))
    return max(1, count)


# ---- policies: Pulsar's PublishRate and DispatchRate documents, and from them (or the broker's defaults) a Rate ----

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
MAX_RATE_PERIOD_S = 86_400
MAX_CLUSTERS = 100  # entries in a per-cluster rate map
# field: (type, minimum, maximum, default); -1 (or 0) is "no limit", as in Pulsar
PUBLISH_RATE_FIELDS = {
    "publishThrottlingRateInMsg": (int, -1, JAVA_INT_MAX, -1),
    "publishThrottlingRateInByte": (int, -1, JAVA_LONG_MAX, -1),
}
DISPATCH_RATE_FIELDS = {
    "dispatchThrottlingRateInMsg": (int, -1, JAVA_INT_MAX, -1),
    "dispatchThrottlingRateInByte": (int, -1, JAVA_LONG_MAX, -1),
    "ratePeriodInSecond": (int, 1, MAX_RATE_PERIOD_S, 1),
    "relativeToPublishRate": (bool, None, None, False),
}


def check_rate_document(doc, shape: dict, what: str) -> dict:
    """``doc`` in canonical form (every field, defaults filled in). ValueError naming the field for anything else:
    not a JSON object, an unknown field, a wrong type, a number out of range."""
    if not isinstance(doc, dict):
        raise ValueError(f"{what} must be a JSON object with the fields {', '.join(shape)}; got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(shape))
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {', '.join(map(str, unknown))[:200]}; its fields are {', '.join(shape)}")
    out = {}
    for name, (kind, low, high, default) in shape.items():
        value = doc.get(name, default)
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}"[:300])
        elif not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in {low}..{high}, got {value!r}"[:300])
        out[name] = value
    return out


def check_rate_map(doc, shape: dict, what: str) -> dict:
    """A per-cluster map {cluster: rate document} as stored in a namespace's policies, checked."""
    if not isinstance(doc, dict) or len(doc) > MAX_CLUSTERS:
        raise ValueError(f"{what} must be a JSON object {{cluster: rate}} of at most {MAX_CLUSTERS} clusters")
    return {str(cluster)[:256]: check_rate_document(rate, shape, f"{what}[{cluster!r}]") for cluster, rate in doc.items()}



def publish_rate(doc: Mapping | None, default_messages: int, default_bytes: int) -> Rate:
    """A namespace's ``PublishRate`` document ({publishThrottlingRateInMsg, publishThrottlingRateInByte}), or the
    broker's defaults (maxPublishRatePerTopicInMessages / InBytes) when the namespace has none."""
    if doc is None:
        return Rate(default_messages, default_bytes)
    return Rate(int(doc.get("publishThrottlingRateInMsg", -1)), int(doc.get("publishThrottlingRateInByte", -1)))


def dispatch_rate(doc: Mapping | None, default_messages: int, default_bytes: int, default_relative: bool) -> Rate:
    """A namespace's ``DispatchRate`` document ({dispatchThrottlingRateInMsg, dispatchThrottlingRateInByte,
    ratePeriodInSecond, relativeToPublishRate}), or the broker's defaults (dispatchThrottlingRatePerTopic* or
    dispatchThrottlingRatePerSubscription*, per second) when the namespace has none."""
    if doc is None:
        return Rate(default_messages, default_bytes, 1.0, default_relative)
    return Rate(int(doc.get("dispatchThrottlingRateInMsg", -1)), int(doc.get("dispatchThrottlingRateInByte", -1)),
                float(max(1, int(doc.get("ratePeriodInSecond", 1)))), bool(doc.get("relativeToPublishRate", False)))
