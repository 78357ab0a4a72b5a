"""A rate policy changed through one broker reaches a topic loaded on another, without an unload (the namespace
policies watch, broker/ownership/policy_watch.py), with the official client measuring the producer's rate."""

from __future__ import annotations

from storage.testing.waiting import wait_until
from tests.cluster.support import client as _client, owner_of
from tests.official_client.support import admin_call as call, publish_all

RATE = 50  # messages per second


def test_a_publish_rate_set_through_another_broker_applies_to_the_loaded_topic(two_brokers):
    ns, topic = "public/rated", "persistent://public/rated/t"
    assert call(two_brokers[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    owner = owner_of(two_brokers, topic)
    other = next(b for b in two_brokers if b is not owner)
    client = _client(owner.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000)
        unlimited_s = publish_all(producer, 5 * RATE)  # the reference, in the same run

        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/publishRate",
                    {"publishThrottlingRateInMsg": RATE, "publishThrottlingRateInByte": -1})[0] == 204
        # The owner hears of it through its watch: within 5 s a burst of 2 s worth takes about a second.
        wait_until(lambda: publish_all(producer, 2 * RATE) >= 0.7, 5 + 3, "the rate to reach the owner")
        limited_s = publish_all(producer, 5 * RATE)
        expected = 5  # the probe above used up the current period: no quota is left to start with
        print(f"two brokers: {5 * RATE} at {RATE}/s in {limited_s:.2f} s (expected {expected}); "
              f"unlimited {unlimited_s:.2f} s")
        assert expected * 0.75 <= limited_s <= expected * 1.6 + 1, (limited_s, unlimited_s)

        assert call(other, "DELETE", f"/admin/v2/namespaces/{ns}/publishRate")[0] == 204
        wait_until(lambda: publish_all(producer, 2 * RATE) < 0.5, 5 + 3, "the removal to reach the owner")
    finally:
        client.close()


def test_a_topic_publish_rate_set_through_another_broker_applies_to_the_loaded_topic(two_brokers):
    """The topic's own policies node is watched too: its rate overrides the namespace's no-limit on the owner."""
    ns, topic = "public/topic-rated", "persistent://public/topic-rated/t"
    assert call(two_brokers[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    owner = owner_of(two_brokers, topic)
    other = next(b for b in two_brokers if b is not owner)
    client = _client(owner.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000)
        assert publish_all(producer, 2 * RATE) < 0.5  # the reference: no limit yet

        assert call(other, "POST", f"/admin/v2/persistent/{ns}/t/publishRate",
                    {"publishThrottlingRateInMsg": RATE})[0] == 204
        wait_until(lambda: publish_all(producer, 2 * RATE) >= 0.7, 5 + 3, "the topic's rate to reach the owner")

        assert call(other, "DELETE", f"/admin/v2/persistent/{ns}/t/publishRate")[0] == 204
        wait_until(lambda: publish_all(producer, 2 * RATE) < 0.5, 5 + 3, "the removal to reach the owner")
    finally:
        client.close()
