"""Rate accounting (broker/topics/rate_limits.py) from tables, with a scripted clock; the publish throttle's pausing
and resuming of connections (broker/topics/throttling.py) with fake connections and the event loop's own timer."""

from __future__ import annotations

import asyncio

import pytest

from broker.config import RATE_LIMIT_FIELDS, BrokerConfig
from broker.pulsar_conf import load_pulsar_file
from broker.topics.rate_limits import (
    DISPATCH_RATE_FIELDS, PUBLISH_RATE_FIELDS, UNLIMITED, Rate, RateLimiter, RateMeter, check_rate_document,
    dispatch_rate, entries_allowed, publish_rate, tightest,
)
from broker.topics.throttling import PublishThrottle
from storage.testing.waiting import wait_until_async


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


# Each step: (time offset, operation, argument, expected). Operations: "record" (messages, bytes) -> None,
# "exhausted" -> bool, "available" -> (messages, bytes), "resume_at" -> time offset, "update" Rate -> None.
LIMITER_CASES = {
    "a quota is used up, then refilled at the next period": (Rate(10), [
        (0.0, "record", (5, 50), None),
        (0.0, "exhausted", None, False),
        (0.0, "available", None, (5, None)),
        (0.5, "record", (5, 50), None),
        (0.5, "exhausted", None, True),
        (0.5, "resume_at", None, 1.0),
        (0.99, "exhausted", None, True),
        (1.0, "exhausted", None, False),
        (1.0, "available", None, (10, None)),
    ]),
    "an overshoot is debt paid by the following periods": (Rate(10), [
        (0.0, "record", (25, 0), None),
        (0.0, "resume_at", None, 2.0),
        (1.0, "exhausted", None, True),
        (1.0, "available", None, (0, None)),
        (2.0, "exhausted", None, False),
        (2.0, "available", None, (5, None)),
    ]),
    "a byte quota alone": (Rate(-1, 1000), [
        (0.0, "record", (1, 999), None),
        (0.0, "exhausted", None, False),
        (0.0, "available", None, (None, 1)),
        (0.0, "record", (1, 1), None),
        (0.0, "exhausted", None, True),
    ]),
    "both quotas: the first used up stops it": (Rate(100, 1000), [
        (0.0, "record", (3, 1000), None),
        (0.0, "exhausted", None, True),
        (0.0, "available", None, (97, 0)),
    ]),
    "0 and -1 are no limit": (Rate(0, -1), [
        (0.0, "record", (10**9, 10**12), None),
        (0.0, "exhausted", None, False),
        (0.0, "available", None, (None, None)),
        (0.0, "resume_at", None, 0.0),
    ]),
    "a longer period": (Rate(10, period_s=5), [
        (0.0, "record", (10, 0), None),
        (4.9, "exhausted", None, True),
        (4.9, "resume_at", None, 5.0),
        (5.0, "exhausted", None, False),
    ]),
    "idle periods clear the count; a period begins with the first use after them": (Rate(10), [
        (0.0, "record", (10, 0), None),
        (5.5, "available", None, (10, None)),
        (5.5, "record", (10, 0), None),
        (5.5, "resume_at", None, 6.5),
        (6.2, "exhausted", None, True),
        (6.5, "exhausted", None, False),
    ]),
    "debt keeps the periods in step": (Rate(10), [
        (0.3, "record", (15, 0), None),
        (1.4, "available", None, (5, None)),
        (1.4, "record", (5, 0), None),
        (1.4, "resume_at", None, 2.3),
    ]),
    "a higher rate frees at once, usage is kept": (Rate(10), [
        (0.0, "record", (10, 0), None),
        (0.0, "update", Rate(20), None),
        (0.0, "exhausted", None, False),
        (0.0, "available", None, (10, None)),
        (0.0, "update", Rate(5), None),
        (0.0, "exhausted", None, True),
        (0.0, "resume_at", None, 2.0),
        (0.0, "update", UNLIMITED, None),
        (0.0, "exhausted", None, False),
    ]),
}


@pytest.mark.parametrize("name", LIMITER_CASES)
def test_rate_limiter(name):
    rate, steps = LIMITER_CASES[name]
    clock = Clock()
    start = clock.now
    limiter = RateLimiter(rate, clock)
    for offset, op, arg, expected in steps:
        clock.now = start + offset
        if op == "record":
            limiter.record(*arg)
        elif op == "update":
            limiter.update(arg)
        elif op == "resume_at":
            assert limiter.resume_at() - start == pytest.approx(expected), (name, offset, op)
        else:
            assert getattr(limiter, op)() == expected, (name, offset, op)


def test_relative_to_publish_rate_adds_the_measured_publish_rate():
    clock = Clock()
    meter = RateMeter(clock)
    limiter = RateLimiter(Rate(10, 100, relative_to_publish_rate=True), clock, extra=meter.rate)
    assert limiter.quota() == (10, 100)  # nothing published in the last second yet
    meter.record(30, 3000)
    clock.now += 1.0
    assert meter.rate() == (30, 3000)
    assert limiter.quota() == (40, 3100)
    clock.now += 2.0  # a second with nothing published: the rate is 0 again, not the stale one
    assert meter.rate() == (0.0, 0.0)
    assert RateLimiter(Rate(10), clock, extra=lambda: (30, 3000)).quota() == (10, -1)  # not relative: unchanged


@pytest.mark.parametrize("count, allowance, avg_bytes, expected", [
    (100, (None, None), 0.0, 100),
    (100, (7, None), 0.0, 7),
    (5, (7, None), 0.0, 5),
    (100, (None, 1000), 100.0, 10),
    (100, (None, 1000), 0.0, 100),  # no entry seen yet: the byte bound cannot be turned into a count
    (100, (3, 1000), 100.0, 3),
    (100, (None, 50), 100.0, 1),  # less than one entry's worth left: one entry, the overshoot is debt
])
def test_entries_allowed(count, allowance, avg_bytes, expected):
    assert entries_allowed(count, allowance, avg_bytes) == expected


def test_tightest_allowance():
    assert tightest([]) == (None, None)
    assert tightest([(5, None), (None, 100), (9, 50)]) == (5, 50)


GOOD_DOCUMENTS = [
    (PUBLISH_RATE_FIELDS, {}, {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": -1}),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInMsg": 100},
     {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}),
    (DISPATCH_RATE_FIELDS, {"dispatchThrottlingRateInByte": 2**40, "relativeToPublishRate": True},
     {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": 2**40, "ratePeriodInSecond": 1,
      "relativeToPublishRate": True}),
]


@pytest.mark.parametrize("shape, doc, expected", GOOD_DOCUMENTS)
def test_rate_documents_are_filled_in_with_pulsars_defaults(shape, doc, expected):
    assert check_rate_document(doc, shape, "rate") == expected


BAD_DOCUMENTS = [  # (shape, body, what the error must name)
    (PUBLISH_RATE_FIELDS, None, "JSON object"),
    (PUBLISH_RATE_FIELDS, [1, 2], "JSON object"),
    (PUBLISH_RATE_FIELDS, 5, "JSON object"),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInMsg": "10"}, "publishThrottlingRateInMsg"),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInMsg": 2**31}, "publishThrottlingRateInMsg"),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInByte": -2}, "publishThrottlingRateInByte"),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInByte": 1.5}, "publishThrottlingRateInByte"),
    (PUBLISH_RATE_FIELDS, {"publishThrottlingRateInMsg": True}, "publishThrottlingRateInMsg"),
    (PUBLISH_RATE_FIELDS, {"publishRate": 10}, "unknown field(s) publishRate"),
    (DISPATCH_RATE_FIELDS, {"ratePeriodInSecond": 0}, "ratePeriodInSecond"),
    (DISPATCH_RATE_FIELDS, {"ratePeriodInSecond": 86_401}, "ratePeriodInSecond"),
    (DISPATCH_RATE_FIELDS, {"relativeToPublishRate": "yes"}, "relativeToPublishRate"),
    (DISPATCH_RATE_FIELDS, {"dispatchThrottlingRateInByte": 2**63}, "dispatchThrottlingRateInByte"),
    (DISPATCH_RATE_FIELDS, {"dispatchThrottlingRateInMsg": None}, "dispatchThrottlingRateInMsg"),
]


@pytest.mark.parametrize("shape, doc, named", BAD_DOCUMENTS)
def test_bad_rate_documents_are_refused_naming_the_field(shape, doc, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        check_rate_document(doc, shape, "rate")


@pytest.mark.parametrize("doc, defaults, expected", [
    (None, (0, 0), Rate(0, 0)),
    (None, (50, 5000), Rate(50, 5000)),
    ({"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}, (50, 5000), Rate(10, -1)),
])
def test_publish_rate_from_policy_or_broker_default(doc, defaults, expected):
    assert publish_rate(doc, *defaults) == expected


@pytest.mark.parametrize("doc, defaults, expected", [
    (None, (0, 0, False), Rate(0, 0)),
    (None, (20, 0, True), Rate(20, 0, 1.0, True)),
    ({"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 3,
      "relativeToPublishRate": False}, (20, 0, True), Rate(5, -1, 3.0, False)),
])
def test_dispatch_rate_from_policy_or_broker_default(doc, defaults, expected):
    assert dispatch_rate(doc, *defaults) == expected


# ---- the publish throttle: connections paused while the rate is used up -------------------------------------------


class Tasks:
    def __init__(self):
        self.paused: dict[str, bool] = {}  # reason -> hold_frames

    def pause_reading(self, reason, *, hold_frames=False):
        self.paused[reason] = hold_frames

    def resume_reading(self, reason):
        self.paused.pop(reason, None)


class Conn:
    closed = False

    def __init__(self):
        self.tasks = Tasks()


async def test_publish_throttle_pauses_the_producers_connections_until_the_next_period():
    loop = asyncio.get_running_loop()
    sender, other, idle = Conn(), Conn(), Conn()
    throttle = PublishThrottle(Rate(3), "publish rate of t", lambda: [sender, other], clock=loop.time)
    throttle.on_send(sender, 2, 20)
    assert not throttle.throttled and not sender.tasks.paused
    throttle.on_send(sender, 1, 10)  # the quota is used up: every producer's connection pauses, frames held
    assert sender.tasks.paused == {"publish rate of t": True} and other.tasks.paused == {"publish rate of t": True}
    assert not idle.tasks.paused
    paused_at = loop.time()
    await wait_until_async(lambda: not throttle.throttled, 5, lambda: "the next period to resume the connections")
    assert not sender.tasks.paused and not other.tasks.paused
    assert loop.time() - paused_at < 1.5  # resumed at the period's end, not later
    assert throttle.throttled_count == 1


async def test_publish_throttle_resumes_at_once_when_the_rate_is_removed():
    loop = asyncio.get_running_loop()
    conn = Conn()
    throttle = PublishThrottle(Rate(1, period_s=3600), "r", lambda: [conn], clock=loop.time)
    throttle.on_send(conn, 1, 1)
    assert throttle.throttled
    throttle.update(UNLIMITED)
    assert not throttle.throttled and not conn.tasks.paused


async def test_publish_throttle_without_a_rate_counts_nothing():
    conn = Conn()
    throttle = PublishThrottle(UNLIMITED, "r", lambda: [conn])
    for _ in range(1000):
        throttle.on_send(conn, 100, 10**6)
    assert not throttle.throttled and throttle.limiter.used_messages == 0


@pytest.mark.parametrize("field", RATE_LIMIT_FIELDS)
def test_rate_defaults_below_minus_one_are_refused_by_name(field):
    assert BrokerConfig("memory://unused", **{field: -1}).validate()  # -1, like 0, is no limit
    with pytest.raises(ValueError, match=field):
        BrokerConfig("memory://unused", **{field: -2}).validate()


def test_pulsar_rate_keys_reach_the_broker_config(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("maxPublishRatePerTopicInMessages=10\nmaxPublishRatePerTopicInBytes=1000\n"
                    "dispatchThrottlingRatePerTopicInMsg=20\ndispatchThrottlingRateRelativeToPublishRate=true\n")
    config = BrokerConfig(**{"metadata_store_url": "memory://unused", **load_pulsar_file(conf).values})
    assert (config.max_publish_rate_per_topic_in_messages, config.max_publish_rate_per_topic_in_bytes,
            config.dispatch_throttling_rate_per_topic_in_msg,
            config.dispatch_throttling_rate_relative_to_publish_rate) == (10, 1000, 20, True)


# ---- a topic's rates from its namespace's policies and the broker's defaults -------------------------------------


def _topic(policies, **config):
    from types import SimpleNamespace

    from broker.topics.names import parse_topic

    return SimpleNamespace(name=parse_topic("persistent://public/default/t"), policies=policies, subscriptions={},
                           producers={}, config=BrokerConfig("memory://unused", **config))


def _policies(**docs):
    from broker.ownership.resources import NamespacePolicies

    return NamespacePolicies.from_json(docs)


def test_topic_rates_take_this_clusters_policy_else_the_broker_default():
    from broker.topics.throttling import TopicRates

    clock = Clock()
    rates = TopicRates(_topic(_policies(), dispatch_throttling_rate_per_subscription_in_msg=7,
                              max_publish_rate_per_topic_in_bytes=500), clock)
    assert rates.dispatch_allowance("s") == (7, None)
    assert rates.publish.limiter.rate == Rate(0, 500)
    # Another cluster's rate does not apply here; this cluster's does, and replaces the default.
    rates.apply(_policies(subscriptionDispatchRate={"elsewhere": {"dispatchThrottlingRateInMsg": 1}}))
    assert rates.dispatch_allowance("s") == (7, None)
    rates.apply(_policies(subscriptionDispatchRate={"standalone": {"dispatchThrottlingRateInMsg": 3}},
                          topicDispatchRate={"standalone": {"dispatchThrottlingRateInByte": 100}}))
    assert rates.dispatch_allowance("s") == (3, 100)
    rates.dispatched("s", 2, 60)
    assert rates.dispatch_allowance("s") == (1, 40)
    assert rates.dispatch_allowance("other") == (3, 40)  # the topic's bytes are shared; each subscription has its own
    rates.dispatched("s", 1, 10)
    assert rates.dispatch_wait("s") == pytest.approx(1.0)
    clock.now += 1.0
    assert rates.dispatch_wait("s") is None


def test_topic_rates_relative_to_publish_rate():
    from broker.topics.throttling import TopicRates

    clock = Clock()
    rates = TopicRates(_topic(_policies(subscriptionDispatchRate={"standalone": {
        "dispatchThrottlingRateInMsg": 10, "relativeToPublishRate": True}})), clock)
    rates.on_send(Conn(), 30, 3000)  # 30 messages published in this second
    clock.now += 1.0
    assert rates.dispatch_allowance("s") == (40, None)  # 10 above the publish rate of the last second


@pytest.mark.parametrize("namespace_doc, topic_doc, expected", [
    (None, None, None),
    ({"standalone": {"a": 1}}, None, {"a": 1}),
    (None, {"standalone": {"t": 2}}, {"t": 2}),
    ({"standalone": {"a": 1}}, {"standalone": {"t": 2}}, {"t": 2}),  # the topic's wins
    ({"standalone": {"a": 1}}, {"elsewhere": {"t": 2}}, {"a": 1}),  # another cluster's topic rate does not apply
])
def test_rate_for_prefers_the_topics_own_rate_of_this_cluster(namespace_doc, topic_doc, expected):
    from types import SimpleNamespace

    from broker.topics.throttling import rate_for

    ns = SimpleNamespace(publish_max_message_rate=namespace_doc)
    topic = SimpleNamespace(publish_max_message_rate=topic_doc)
    assert rate_for("standalone", "publish_max_message_rate", ns, topic) == expected


def test_topic_rates_follow_the_topics_own_policies_over_the_namespaces():
    from broker.topics.throttling import TopicRates

    clock = Clock()
    namespace = _policies(publishMaxMessageRate={"standalone": {"publishThrottlingRateInMsg": 10}},
                          subscriptionDispatchRate={"standalone": {"dispatchThrottlingRateInMsg": 5}})
    rates = TopicRates(_topic(namespace), clock)
    assert rates.publish.limiter.rate == Rate(10, -1) and rates.dispatch_allowance("s") == (5, None)
    # The topic sets its own publish rate (-1: no limit) and keeps the namespace's subscription dispatch rate.
    rates.apply(namespace, _policies(publishMaxMessageRate={"standalone": {"publishThrottlingRateInMsg": -1}}))
    assert not rates.publish.limiter.rate.limited and rates.dispatch_allowance("s") == (5, None)
    rates.apply(namespace, _policies(subscriptionDispatchRate={"standalone": {"dispatchThrottlingRateInMsg": 2}}))
    assert rates.publish.limiter.rate == Rate(10, -1) and rates.dispatch_allowance("s") == (2, None)
    rates.apply(namespace, None)  # the topic's removed: the namespace's again
    assert rates.dispatch_allowance("s") == (5, None)


@pytest.mark.parametrize("config, attr, expected", [
    ({}, "publish_max_message_rate", None),
    ({"max_publish_rate_per_topic_in_messages": 10}, "publish_max_message_rate",
     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 0}),
    ({"dispatch_throttling_rate_per_topic_in_byte": 512}, "topic_dispatch_rate",
     {"dispatchThrottlingRateInMsg": 0, "dispatchThrottlingRateInByte": 512, "ratePeriodInSecond": 1,
      "relativeToPublishRate": False}),
    ({"dispatch_throttling_rate_per_topic_in_byte": 512}, "subscription_dispatch_rate", None),
    ({"dispatch_throttling_rate_per_subscription_in_msg": 7, "dispatch_throttling_rate_relative_to_publish_rate": True},
     "subscription_dispatch_rate", {"dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": 0,
                                    "ratePeriodInSecond": 1, "relativeToPublishRate": True}),
])
def test_the_broker_default_a_topics_applied_rate_falls_back_to(config, attr, expected):
    from broker.http.rate_policies import _broker_default

    assert _broker_default(BrokerConfig("memory://unused", **config), attr) == expected
