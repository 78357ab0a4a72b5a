"""Subscription expiry (subscriptionExpirationTimeMinutes) on a real standalone broker with the official client.

The unit is minutes, as in Pulsar. To run in seconds with the broker's real periodic check, the broker's default
is a fraction of a minute (0.05 min = 3 s; our config takes a fraction, Pulsar's key and the namespace policy
take whole minutes) and the check runs every half second (subscription_expiry_check_interval_s)."""

from __future__ import annotations

import time
import uuid

import pulsar

from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call as call, publish_all, receive_n

EXPIRY_S = 3.0
FAST_EXPIRY = {"MAGNETAR_BROKER_SUBSCRIPTION_EXPIRATION_TIME_MINUTES": str(EXPIRY_S / 60),
               "MAGNETAR_BROKER_SUBSCRIPTION_EXPIRY_CHECK_INTERVAL_S": "0.5"}


def _subscriptions(broker, topic: str) -> list[str]:
    status, subs = call(broker, "GET", "/admin/v2/" + topic.replace("://", "/") + "/subscriptions")
    assert status == 200, subs
    return subs


def test_an_inactive_subscription_expires_and_an_active_one_does_not(start_standalone):
    broker = start_standalone(env=dict(FAST_EXPIRY))
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        topic = f"persistent://public/default/expiry-{uuid.uuid4().hex[:6]}"
        # A namespace whose policy says 0 (never) keeps its idle subscriptions whatever the broker's default.
        keep_ns = f"public/keep-{uuid.uuid4().hex[:6]}"
        assert call(broker, "PUT", f"/admin/v2/namespaces/{keep_ns}")[0] == 204
        assert call(broker, "POST", f"/admin/v2/namespaces/{keep_ns}/subscriptionExpirationTime", 0)[0] == 204
        kept_topic = f"persistent://{keep_ns}/t"
        client.subscribe(kept_topic, "idle").close()

        active = client.subscribe(topic, "active", initial_position=pulsar.InitialPosition.Earliest)
        client.subscribe(topic, "inactive", initial_position=pulsar.InitialPosition.Earliest).close()
        idle_from = time.monotonic()
        publish_all(client.create_producer(topic, batching_enabled=False), 5)
        assert sorted(_subscriptions(broker, topic)) == ["active", "inactive"]

        wait_until(lambda: "inactive" not in _subscriptions(broker, topic), EXPIRY_S + 10,
                   lambda: f"the inactive subscription to expire; have {_subscriptions(broker, topic)}")
        expired_after = time.monotonic() - idle_from
        print(f"expired {expired_after:.2f} s after its consumer left (expiry {EXPIRY_S} s, check every 0.5 s)")
        assert expired_after >= EXPIRY_S - 0.5, expired_after  # not before its time

        # The subscription with a consumer stays and still gets its messages; the kept namespace's too.
        assert _subscriptions(broker, topic) == ["active"]
        assert [m.data() for m in receive_n(active, 5)] == [f"m{i}".encode() for i in range(5)]
        assert _subscriptions(broker, kept_topic) == ["idle"]
        # The expired one is gone for good: subscribing again under its name starts at the end, with no backlog.
        again = client.subscribe(topic, "inactive")
        stats = call(broker, "GET", "/admin/v2/" + topic.replace("://", "/") + "/stats")[1]
        assert stats["subscriptions"]["inactive"]["msgBacklog"] == 0
        again.close()
    finally:
        client.close()
