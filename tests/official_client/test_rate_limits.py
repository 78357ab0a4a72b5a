"""Publish and dispatch rates with the official client on a real standalone broker: the namespace policies in
Pulsar's REST shapes, a producer's and a consumer's throughput held to the rate, changes applied to loaded topics.

Throughput is measured from the client's side: the time until the receipts (or messages) of a fixed number of
messages have all arrived. A rate of N msg/s with a one-second period lets N through at once and N more at each
following second, so M messages take about M/N - 1 seconds; the bounds below allow for the shared machine."""

from __future__ import annotations

import threading
import time
import uuid

import pulsar
import pytest

from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call as call, publish_all, receive_n

RATE = 50  # messages per second
MESSAGES = 5 * RATE  # about 4 s at the rate


def _namespace(standalone, name: str) -> str:
    ns = f"public/{name}-{uuid.uuid4().hex[:6]}"
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    return ns


def _receive_all(consumer, count: int) -> float:
    """The seconds from the first message to the last of ``count``."""
    first = receive_n(consumer, 1)
    started = time.monotonic()
    receive_n(consumer, count - 1, timeout_s=30)
    assert first
    return time.monotonic() - started


def _expected_s(count: int, rate: int) -> float:
    return count / rate - 1


# ---- REST: Pulsar's shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy, body, stored", [
    ("publishRate", {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000},
     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000}),
    ("publishRate", {"publishThrottlingRateInMsg": 10},
     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}),
    ("dispatchRate", {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1,
                      "ratePeriodInSecond": 2, "relativeToPublishRate": True},
     {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 2,
      "relativeToPublishRate": True}),
    ("subscriptionDispatchRate", {"dispatchThrottlingRateInByte": 1 << 20},
     {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": 1 << 20, "ratePeriodInSecond": 1,
      "relativeToPublishRate": False}),
])
def test_rate_policy_get_returns_what_post_set_and_delete_removes_it(standalone, policy, body, stored):
    ns = _namespace(standalone, "rest")
    path = f"/admin/v2/namespaces/{ns}/{policy}"
    assert call(standalone, "GET", path)[0] == 204  # not set: no content, as Pulsar answers
    assert call(standalone, "POST", path, body)[0] == 204
    assert call(standalone, "GET", path) == (200, stored)
    # Stored in the namespace's policies under Pulsar's names, per cluster.
    pulsar_name = {"publishRate": "publishMaxMessageRate", "dispatchRate": "topicDispatchRate",
                   "subscriptionDispatchRate": "subscriptionDispatchRate"}[policy]
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}")[1][pulsar_name] == {"standalone": stored}
    assert call(standalone, "DELETE", path)[0] == 204
    assert call(standalone, "GET", path)[0] == 204
    assert pulsar_name not in call(standalone, "GET", f"/admin/v2/namespaces/{ns}")[1]


@pytest.mark.parametrize("policy, body, named", [
    ("publishRate", {"publishThrottlingRateInMsg": "ten"}, "publishThrottlingRateInMsg"),
    ("publishRate", {"publishThrottlingRateInByte": -5}, "publishThrottlingRateInByte"),
    ("publishRate", {"publishThrottlingRateInMsg": 2**31}, "publishThrottlingRateInMsg"),
    ("publishRate", {"msgRate": 10}, "msgRate"),
    ("publishRate", 10, "JSON object"),
    ("dispatchRate", {"ratePeriodInSecond": 0}, "ratePeriodInSecond"),
    ("dispatchRate", {"relativeToPublishRate": 1}, "relativeToPublishRate"),
    ("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 1.5}, "dispatchThrottlingRateInMsg"),
    ("subscriptionDispatchRate", [], "JSON object"),
])
def test_bad_rate_bodies_get_400_naming_the_field(standalone, policy, body, named):
    ns = _namespace(standalone, "bad")
    status, answer = call(standalone, "POST", f"/admin/v2/namespaces/{ns}/{policy}", body)
    assert status == 400 and named in answer["reason"], answer
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/{policy}")[0] == 204  # nothing stored


def test_rates_in_a_namespace_created_with_pulsars_policies_document(standalone, client):
    """PUT .../{ns} with a Pulsar Policies body: its rates are checked (400 naming the field), stored and applied."""
    ns = f"public/created-{uuid.uuid4().hex[:6]}"
    bad = {"publishMaxMessageRate": {"standalone": {"publishThrottlingRateInMsg": "x"}}}
    status, answer = call(standalone, "PUT", f"/admin/v2/namespaces/{ns}", bad)
    assert status == 400 and "publishThrottlingRateInMsg" in answer["reason"]
    good = {"subscriptionDispatchRate": {"standalone": {"dispatchThrottlingRateInMsg": RATE}}}
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}", good)[0] == 204
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/subscriptionDispatchRate")[1] == {
        "dispatchThrottlingRateInMsg": RATE, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1,
        "relativeToPublishRate": False}
    topic = f"persistent://{ns}/t"
    client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
    publish_all(client.create_producer(topic, batching_enabled=False), 3 * RATE)
    elapsed = _receive_all(client.subscribe(topic, "s"), 3 * RATE)
    assert 2 * 0.75 <= elapsed <= 2 * 1.6 + 1, elapsed


def test_rate_policies_of_a_missing_namespace_are_404(standalone):
    for method in ("GET", "POST", "DELETE"):
        body = {"publishThrottlingRateInMsg": 1} if method == "POST" else None
        assert call(standalone, method, "/admin/v2/namespaces/public/no-such-ns/publishRate", body)[0] == 404


# ---- publish rate ------------------------------------------------------------------------------------------------


def test_publish_rate_holds_a_producer_to_the_rate_and_changes_apply_to_the_loaded_topic(standalone, client):
    ns = _namespace(standalone, "pubrate")
    topic = f"persistent://{ns}/t"
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * MESSAGES)
    unlimited_s = publish_all(producer, MESSAGES)  # the reference, in the same run

    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/publishRate",
                {"publishThrottlingRateInMsg": RATE, "publishThrottlingRateInByte": -1})[0] == 204
    limited_s = publish_all(producer, MESSAGES)
    expected = _expected_s(MESSAGES, RATE)
    print(f"publish {MESSAGES} at {RATE}/s: {limited_s:.2f} s (expected {expected:.1f}); unlimited {unlimited_s:.2f} s")
    assert expected * 0.75 <= limited_s <= expected * 1.6 + 1, (limited_s, expected, unlimited_s)
    stats = call(standalone, "GET", f"/admin/v2/persistent/{ns}/t/stats")[1]
    assert stats["publishRateLimitedTimes"] >= 1 and stats["msgInCounter"] == 2 * MESSAGES

    # Removed on the loaded topic (no unload): the producer is at full speed again.
    assert call(standalone, "DELETE", f"/admin/v2/namespaces/{ns}/publishRate")[0] == 204
    after_s = publish_all(producer, MESSAGES)
    print(f"after DELETE: {after_s:.2f} s")
    assert after_s < expected * 0.5, (after_s, unlimited_s)


def test_publish_rate_in_bytes(standalone, client):
    ns = _namespace(standalone, "pubbytes")
    topic = f"persistent://{ns}/t"
    payload = b"x" * 1000
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/publishRate",
                {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 20 * 1024})[0] == 204
    producer = client.create_producer(topic, batching_enabled=False)
    done = []
    started = time.monotonic()
    for _ in range(100):  # 100 KB and some at 20 KiB/s: about 4 s
        producer.send_async(payload, lambda result, _id: done.append(result))
    wait_until(lambda: len(done) == 100, 30, lambda: f"receipts; have {len(done)}")
    elapsed = time.monotonic() - started
    print(f"publish 100 x 1000 B at 20 KiB/s: {elapsed:.2f} s")
    stored_bytes = call(standalone, "GET", f"/admin/v2/persistent/{ns}/t/stats")[1]["bytesInCounter"]
    expected = stored_bytes / (20 * 1024) - 1
    assert expected * 0.75 <= elapsed <= expected * 1.6 + 1, (elapsed, expected)
    assert set(done) == {pulsar.Result.Ok}


# ---- dispatch rates --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["dispatchRate", "subscriptionDispatchRate"])
def test_dispatch_rate_holds_a_consumer_to_the_rate(standalone, client, policy):
    ns = _namespace(standalone, "disprate")
    topic = f"persistent://{ns}/t"
    fast = client.subscribe(topic, "reference", initial_position=pulsar.InitialPosition.Earliest)
    slow = client.subscribe(topic, "limited", initial_position=pulsar.InitialPosition.Earliest)
    fast.close()
    slow.close()
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * MESSAGES)
    publish_all(producer, MESSAGES)

    unlimited_s = _receive_all(client.subscribe(topic, "reference"), MESSAGES)  # the reference, same run
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/{policy}",
                {"dispatchThrottlingRateInMsg": RATE, "dispatchThrottlingRateInByte": -1,
                 "ratePeriodInSecond": 1, "relativeToPublishRate": False})[0] == 204
    consumer = client.subscribe(topic, "limited")
    limited_s = _receive_all(consumer, MESSAGES)
    expected = _expected_s(MESSAGES, RATE)
    print(f"{policy}: {MESSAGES} at {RATE}/s in {limited_s:.2f} s (expected {expected:.1f}); unlimited {unlimited_s:.2f} s")
    assert expected * 0.75 <= limited_s <= expected * 1.6 + 1, (limited_s, expected, unlimited_s)

    # Removed while the consumer is connected: what comes next is not held back.
    assert call(standalone, "DELETE", f"/admin/v2/namespaces/{ns}/{policy}")[0] == 204
    publish_all(producer, MESSAGES)
    assert _receive_all(consumer, MESSAGES) < expected * 0.5


def test_a_dispatch_rate_with_a_longer_period(standalone, client):
    """ratePeriodInSecond: RATE messages per 2 s is half the throughput of RATE per second."""
    ns = _namespace(standalone, "period")
    topic = f"persistent://{ns}/t"
    client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    count = 3 * RATE
    publish_all(producer, count)
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/subscriptionDispatchRate",
                {"dispatchThrottlingRateInMsg": RATE, "ratePeriodInSecond": 2})[0] == 204
    elapsed = _receive_all(client.subscribe(topic, "s"), count)
    expected = 2 * _expected_s(count, RATE)  # 4 s
    print(f"{count} at {RATE} per 2 s: {elapsed:.2f} s (expected {expected:.1f})")
    assert expected * 0.75 <= elapsed <= expected * 1.6 + 1, (elapsed, expected)


# ---- topic-level rates: override the namespace's ------------------------------------------------------------------

_UNLIMITED_PUBLISH = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": -1}


def test_topic_rate_rest_shapes_applied_value_and_bad_input(standalone, client):
    ns = _namespace(standalone, "topicrest")
    topic = f"persistent://{ns}/t"
    base = f"/admin/v2/persistent/{ns}/t"
    assert call(standalone, "GET", f"{base}/publishRate")[0] == 404  # no such topic yet
    client.create_producer(topic).close()
    for policy in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert call(standalone, "GET", f"{base}/{policy}")[0] == 204
    assert call(standalone, "POST", f"{base}/dispatchRate", {"dispatchThrottlingRateInMsg": 30})[0] == 204
    assert call(standalone, "GET", f"{base}/dispatchRate") == (200, {
        "dispatchThrottlingRateInMsg": 30, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1,
        "relativeToPublishRate": False})
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/dispatchRate")[0] == 204  # the topic's own only
    status, answer = call(standalone, "POST", f"{base}/subscriptionDispatchRate", {"ratePeriodInSecond": 0})
    assert status == 400 and "ratePeriodInSecond" in answer["reason"]
    assert call(standalone, "GET", f"{base}/subscriptionDispatchRate")[0] == 204  # nothing stored
    # applied: the topic's, else the namespace's.
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/publishRate", {"publishThrottlingRateInMsg": 9})[0] == 204
    assert call(standalone, "GET", f"{base}/publishRate")[0] == 204
    assert call(standalone, "GET", f"{base}/publishRate?applied=true") == (200, {
        "publishThrottlingRateInMsg": 9, "publishThrottlingRateInByte": -1})
    assert call(standalone, "DELETE", f"{base}/dispatchRate")[0] == 204
    assert call(standalone, "GET", f"{base}/dispatchRate")[0] == 204


def test_topic_publish_rate_overrides_the_namespace_and_delete_brings_it_back(standalone, client):
    ns = _namespace(standalone, "topicpub")
    topic = f"persistent://{ns}/t"
    base = f"/admin/v2/persistent/{ns}/t"
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * MESSAGES)
    unlimited_s = publish_all(producer, MESSAGES)  # the reference, in the same run

    # Set on the loaded topic (no unload), with no namespace rate: the producer is held to it.
    assert call(standalone, "POST", f"{base}/publishRate", {"publishThrottlingRateInMsg": RATE})[0] == 204
    limited_s = publish_all(producer, MESSAGES)
    expected = _expected_s(MESSAGES, RATE)
    print(f"topic publishRate: {MESSAGES} at {RATE}/s in {limited_s:.2f} s (expected {expected:.1f}); "
          f"unlimited {unlimited_s:.2f} s")
    assert expected * 0.75 <= limited_s <= expected * 1.6 + 1, (limited_s, expected, unlimited_s)

    # The namespace limits its topics, but this topic's own -1 (no limit) wins.
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/publishRate", {"publishThrottlingRateInMsg": RATE})[0] == 204
    assert call(standalone, "POST", f"{base}/publishRate", _UNLIMITED_PUBLISH)[0] == 204
    assert publish_all(producer, MESSAGES) < expected * 0.5

    # Without the topic's rate the namespace's applies again: 2 s worth takes about a second.
    assert call(standalone, "DELETE", f"{base}/publishRate")[0] == 204
    assert call(standalone, "GET", f"{base}/publishRate")[0] == 204
    again_s = publish_all(producer, 2 * RATE)
    assert again_s >= 0.7, again_s


@pytest.mark.parametrize("policy", ["dispatchRate", "subscriptionDispatchRate"])
def test_topic_dispatch_rate_holds_a_consumer_to_the_rate(standalone, client, policy):
    ns = _namespace(standalone, "topicdisp")
    topic = f"persistent://{ns}/t"
    for sub in ("reference", "limited"):
        client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * MESSAGES)
    publish_all(producer, MESSAGES)
    unlimited_s = _receive_all(client.subscribe(topic, "reference"), MESSAGES)  # the reference, same run

    assert call(standalone, "POST", f"/admin/v2/persistent/{ns}/t/{policy}",
                {"dispatchThrottlingRateInMsg": RATE})[0] == 204
    consumer = client.subscribe(topic, "limited")
    limited_s = _receive_all(consumer, MESSAGES)
    expected = _expected_s(MESSAGES, RATE)
    print(f"topic {policy}: {MESSAGES} at {RATE}/s in {limited_s:.2f} s (expected {expected:.1f}); "
          f"unlimited {unlimited_s:.2f} s")
    assert expected * 0.75 <= limited_s <= expected * 1.6 + 1, (limited_s, expected, unlimited_s)

    assert call(standalone, "DELETE", f"/admin/v2/persistent/{ns}/t/{policy}")[0] == 204
    publish_all(producer, MESSAGES)
    assert _receive_all(consumer, MESSAGES) < expected * 0.5


def test_a_partitioned_topics_rate_applies_to_each_partition(standalone, client):
    ns = _namespace(standalone, "topicparts")
    assert call(standalone, "PUT", f"/admin/v2/persistent/{ns}/p/partitions", 2)[0] == 204
    assert call(standalone, "POST", f"/admin/v2/persistent/{ns}/p/publishRate", {"publishThrottlingRateInMsg": RATE})[0] == 204
    producer = client.create_producer(f"persistent://{ns}/p-partition-1", batching_enabled=False,
                                      max_pending_messages=2 * MESSAGES)
    elapsed = publish_all(producer, 3 * RATE)
    expected = _expected_s(3 * RATE, RATE)
    assert expected * 0.75 <= elapsed <= expected * 1.6 + 1, (elapsed, expected)


# ---- the broker's defaults, by Pulsar's keys in a properties file ------------------------------------------------


@pytest.fixture(scope="module")
def defaults_broker(tmp_path_factory):
    """A standalone broker whose defaults limit every subscription's dispatch and the broker's publishing."""
    from storage.testing.processes import BrokerProcess

    root = tmp_path_factory.mktemp("rate-defaults")
    conf = root / "standalone.conf"
    conf.write_text(f"dispatchThrottlingRatePerSubscriptionInMsg={RATE}\n"
                    f"brokerPublisherThrottlingMaxMessageRate={2 * RATE}\n")
    broker = BrokerProcess(root / "data", extra_args=["--config", str(conf)])
    broker.start(timeout_s=60)
    yield broker
    broker.stop()


def test_broker_default_subscription_dispatch_rate_and_a_namespace_policy_over_it(defaults_broker):
    c = pulsar.Client(defaults_broker.service_url, operation_timeout_seconds=15,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        ns = _namespace(defaults_broker, "defaults")
        topic = f"persistent://{ns}/t"
        for sub in ("by-default", "by-policy"):
            c.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest).close()
        publish_all(c.create_producer(topic, batching_enabled=False), MESSAGES, timeout_s=60)
        elapsed = _receive_all(c.subscribe(topic, "by-default"), MESSAGES)
        expected = _expected_s(MESSAGES, RATE)
        print(f"broker default {RATE}/s per subscription: {MESSAGES} in {elapsed:.2f} s (expected {expected:.1f})")
        assert expected * 0.75 <= elapsed <= expected * 1.6 + 1, elapsed
        # The namespace's policy wins over the broker's default: -1 is no limit.
        assert call(defaults_broker, "POST", f"/admin/v2/namespaces/{ns}/subscriptionDispatchRate",
                    {"dispatchThrottlingRateInMsg": -1})[0] == 204
        assert _receive_all(c.subscribe(topic, "by-policy"), MESSAGES) < expected * 0.5
    finally:
        c.close()


def test_broker_wide_publish_rate_counts_every_topic_together(defaults_broker):
    c = pulsar.Client(defaults_broker.service_url, operation_timeout_seconds=15,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producers = [c.create_producer(f"persistent://public/default/broker-wide-{i}-{uuid.uuid4().hex[:6]}",
                                       batching_enabled=False) for i in range(2)]
        results = []
        threads = [threading.Thread(target=lambda p=p: results.append(publish_all(p, MESSAGES, timeout_s=60)))
                   for p in producers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        expected = _expected_s(2 * MESSAGES, 2 * RATE)  # 500 messages at 100/s, both topics together
        print(f"broker-wide {2 * RATE}/s: two topics x {MESSAGES} in {max(results):.2f} s (expected {expected:.1f})")
        assert len(results) == 2 and expected * 0.75 <= max(results) <= expected * 1.6 + 1, results
    finally:
        c.close()
