"""Applying publish and dispatch rates to a loaded topic: the I/O around broker/topics/rate_limits.py.

Publish (Pulsar's publish rate limiting): every SEND is counted against the
topic's limiter (and the broker-wide one) as it is read. Once the limiter is
used up for the period, every connection with a producer on the topic stops
reading, and stops handling frames it has already read, until the period in
which the limiter has room again. The producers get no error: their sends
wait in their own queues, which block or fail as their settings say.

Dispatch: a subscription's dispatcher asks ``dispatch_allowance`` before each
read, reads no more entries than the topic's and the subscription's limiters
allow, and waits ``dispatch_wait`` seconds when either is used up. What went
out is counted with ``dispatched``.

A policy change reaches a loaded topic through ``apply`` (the admin routes
call it for the topics of the namespace or topic they changed, the policy
watch on every other broker); a topic's own rate overrides its namespace's,
which overrides the broker's default. Counts already made are kept, so a
change never lets a burst through.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable

from broker.topics.rate_limits import (
    UNLIMITED, Clock, Rate, RateLimiter, RateMeter, dispatch_rate, entries_allowed, publish_rate, tightest,
)

BROKER_PUBLISH_RATE = "broker publish rate"


def rate_for(cluster: str, attr: str, policies, topic_policies=None) -> dict | None:
    """This cluster's rate document ``attr`` from the topic's own policies, else from its namespace's; None for
    neither (the broker's default applies). A topic's document wins even when it says -1 (no limit), as in Pulsar."""
    for source in (topic_policies, policies):
        doc = (getattr(source, attr, None) or {}).get(cluster)
        if doc is not None:
            return doc
    return None


class PublishThrottle:
    """Pauses the reading of producers' connections while a limiter is used up, and resumes it when it has room.

    ``connections()`` lists the connections to pause when throttling starts (those with producers on the topic, or
    on the broker); a connection that sends while throttled is paused too."""

    def __init__(self, rate: Rate, reason: str, connections: Callable[[], Iterable], clock: Clock = time.monotonic):
        self.limiter = RateLimiter(rate, clock)
        self.reason = reason
        self.connections = connections
        self._paused: dict[int, object] = {}  # id(connection) -> connection
        self._timer: asyncio.TimerHandle | None = None
        self.throttled_count = 0  # times throttling started (stats)

    @property
    def throttled(self) -> bool:
        return bool(self._paused)

    def on_send(self, conn, messages: int, nbytes: int) -> None:
        if not self.limiter.rate.limited:
            return
        self.limiter.record(messages, nbytes)
        if not self.limiter.exhausted():
            return
        if self._timer is None:
            self.throttled_count += 1
            for other in list(self.connections()):
                self._pause(other)
            self._arm()
        self._pause(conn)

    def update(self, rate: Rate) -> None:
        self.limiter.update(rate)
        if self._timer is not None:  # decide again now: a higher rate (or none) frees the producers at once
            self._timer.cancel()
            self._tick()

    def release(self) -> None:
        """Resume every paused connection (the topic closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        paused, self._paused = self._paused, {}
        for conn in paused.values():
            conn.tasks.resume_reading(self.reason)

    def _pause(self, conn) -> None:
        if id(conn) not in self._paused and not conn.closed:
            self._paused[id(conn)] = conn
            conn.tasks.pause_reading(self.reason, hold_frames=True)

    def _arm(self) -> None:
        delay = max(0.0, self.limiter.resume_at() - self.limiter.clock())
        self._timer = asyncio.get_running_loop().call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.limiter.rate.limited and self.limiter.exhausted():
            self._arm()
            return
        self.release()


class TopicRates:
    """A topic's publish limiter and throttle, its topic-wide dispatch limiter and one per subscription."""

    def __init__(self, topic, clock: Clock = time.monotonic):
        self.topic = topic
        self.clock = clock
        self.publish_meter = RateMeter(clock)
        self.publish = PublishThrottle(UNLIMITED, f"publish rate of {topic.name}", self._producer_connections, clock)
        self.dispatch = self._limiter(UNLIMITED)
        self.subscription_rate = UNLIMITED
        self._measure_publish = False  # only a relativeToPublishRate dispatch rate needs the publish rate
        self._subscriptions: dict[str, RateLimiter] = {}
        self.apply(topic.policies, getattr(topic, "topic_policies", None))

    def apply(self, policies, topic_policies=None) -> None:
        """Take the rates of the topic's own policies, else of its namespace's ``policies``, else the broker's
        defaults (each rate on its own: a topic may set its publish rate and keep its namespace's dispatch rate)."""
        config, cluster = self.topic.config, self.topic.config.cluster_name
        publish_doc, dispatch_doc, subscription_doc = (
            rate_for(cluster, name, policies, topic_policies)
            for name in ("publish_max_message_rate", "topic_dispatch_rate", "subscription_dispatch_rate"))
        self.publish.update(publish_rate(publish_doc, config.max_publish_rate_per_topic_in_messages,
                                         config.max_publish_rate_per_topic_in_bytes))
        relative = config.dispatch_throttling_rate_relative_to_publish_rate
        self.dispatch.update(dispatch_rate(dispatch_doc, config.dispatch_throttling_rate_per_topic_in_msg,
                                           config.dispatch_throttling_rate_per_topic_in_byte, relative))
        self.subscription_rate = dispatch_rate(subscription_doc, config.dispatch_throttling_rate_per_subscription_in_msg,
                                               config.dispatch_throttling_rate_per_subscription_in_byte, relative)
        for limiter in self._subscriptions.values():
            limiter.update(self.subscription_rate)
        self._measure_publish = any(r.limited and r.relative_to_publish_rate
                                    for r in (self.dispatch.rate, self.subscription_rate))
        for sub in list(self.topic.subscriptions.values()):
            if sub.dispatcher is not None:
                sub.dispatcher.wake()  # a dispatcher waiting out a period decides again under the new rate

    # ---- publish -----------------------------------------------------------

    def on_send(self, conn, messages: int, nbytes: int) -> None:
        """Count a SEND as it is read; pauses the producers' connections when the topic's rate is used up."""
        if self._measure_publish:
            self.publish_meter.record(messages, nbytes)
        self.publish.on_send(conn, messages, nbytes)

    def _producer_connections(self):
        return {id(p.connection): p.connection for p in self.topic.producers}.values()

    # ---- dispatch ----------------------------------------------------------

    def _limiter(self, rate: Rate) -> RateLimiter:
        return RateLimiter(rate, self.clock, extra=self.publish_meter.rate)

    def _limiters(self, subscription: str) -> list[RateLimiter]:
        out = [self.dispatch] if self.dispatch.rate.limited else []
        if self.subscription_rate.limited:
            limiter = self._subscriptions.get(subscription)
            if limiter is None:
                limiter = self._subscriptions[subscription] = self._limiter(self.subscription_rate)
            out.append(limiter)
        return out

    def dispatch_wait(self, subscription: str) -> float | None:
        """Seconds until ``subscription`` may dispatch again, or None when it may now."""
        used_up = [lim for lim in self._limiters(subscription) if lim.exhausted()]
        if not used_up:
            return None
        return max(0.001, max(lim.resume_at() for lim in used_up) - self.clock())

    def dispatch_allowance(self, subscription: str) -> tuple[int | None, int | None]:
        """(messages, bytes) ``subscription`` may still dispatch this period; None for no limit."""
        return tightest([lim.available() for lim in self._limiters(subscription)])

    def dispatched(self, subscription: str, messages: int, nbytes: int) -> None:
        for limiter in self._limiters(subscription):
            limiter.record(messages, nbytes)

    def for_subscription(self, subscription: str) -> "SubscriptionRates":
        return SubscriptionRates(self, subscription)

    def forget_subscription(self, subscription: str) -> None:
        self._subscriptions.pop(subscription, None)

    def close(self) -> None:
        self.publish.release()

    def stats(self) -> dict:
        return {"publishRateLimitedTimes": self.publish.throttled_count}


class SubscriptionRates:
    """What one subscription's dispatcher asks: the topic's and the subscription's dispatch limiters together."""

    def __init__(self, rates: TopicRates, subscription: str):
        self.rates = rates
        self.subscription = subscription

    def wait(self) -> float | None:
        return self.rates.dispatch_wait(self.subscription)

    def entries(self, count: int, avg_entry_bytes: float) -> int:
        """How many of ``count`` entries the next read may bring under the rates."""
        return entries_allowed(count, self.rates.dispatch_allowance(self.subscription), avg_entry_bytes)


def broker_publish_throttle(config, connections: Callable[[], Iterable]) -> PublishThrottle:
    """The broker-wide publish limiter (brokerPublisherThrottlingMaxMessageRate / MaxByteRate, per second)."""
    rate = Rate(config.broker_publisher_throttling_max_message_rate, config.broker_publisher_throttling_max_byte_rate)
    return PublishThrottle(rate, BROKER_PUBLISH_RATE, connections)
