"""A policy changed through one broker takes effect on a topic loaded on another within 5 s, without an unload
(broker/ownership/policy_watch.py): limits, dedup, TTL and the backlog quota, at namespace and topic level; and a
topic's own policies are in the metadata store, so the broker that takes the topic over applies them too."""

from __future__ import annotations

import time

import pulsar
import pytest

from storage.testing.waiting import wait_until
from tests.cluster.support import client as _client, owner_of
from tests.official_client.support import admin_call as call

LIVE_WITHIN_S = 5
CHECKS = {"MAGNETAR_BROKER_MESSAGE_EXPIRY_CHECK_INTERVAL_S": "1", "MAGNETAR_BROKER_BACKLOG_QUOTA_CHECK_INTERVAL_S": "1"}


@pytest.fixture
def cluster(start_brokers):
    return start_brokers(2, env=CHECKS)


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def _setup(cluster, ns: str, topic: str):
    assert call(cluster[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    owner = owner_of(cluster, topic)
    other = next(b for b in cluster if b is not owner)
    return owner, other


def _within(check, what: str) -> float:
    started = time.monotonic()
    wait_until(check, LIVE_WITHIN_S, what)
    return time.monotonic() - started


def _refused(client, topic, error) -> bool:
    try:
        client.create_producer(topic).close()
        return False
    except error:
        return True


def test_limits_dedup_ttl_and_quota_changed_through_another_broker_apply_within_5_s(cluster):
    ns, topic = "public/live", "persistent://public/live/t"
    owner, other = _setup(cluster, ns, topic)
    client = _client(owner.service_url)
    try:
        client.subscribe(topic, "idle").close()
        keeper = client.create_producer(topic, batching_enabled=False)  # keeps the topic loaded on the owner
        assert call(owner, "GET", _path(topic) + "/stats")[0] == 200

        # limits: a second producer is refused once maxProducersPerTopic = 1 arrives
        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/maxProducersPerTopic", 1)[0] == 204
        took = _within(lambda: _refused(client, topic, pulsar.ProducerBusy), "the producer limit to reach the owner")
        print(f"maxProducersPerTopic live after {took:.2f} s")
        assert call(other, "DELETE", f"/admin/v2/namespaces/{ns}/maxProducersPerTopic")[0] == 204

        # dedup: enabled through the other broker, a resent sequence id is dropped on the owner
        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)[0] == 204
        took = _within(lambda: call(owner, "GET", _path(topic) + "/stats")[1]["deduplicationStatus"] == "Enabled",
                       "dedup to be enabled on the owner")
        print(f"deduplication live after {took:.2f} s")
        keeper.send(b"once", sequence_id=1000)
        before = call(owner, "GET", _path(topic) + "/stats")[1]["msgInCounter"]
        keeper.send(b"once", sequence_id=1000)  # the same sequence id again: a duplicate
        assert call(owner, "GET", _path(topic) + "/stats")[1]["msgInCounter"] == before
        keeper.close()  # its sequence ids jumped to 1000: a new producer starts its own
        keeper = client.create_producer(topic, batching_enabled=False)

        # TTL: the idle subscription's backlog expires
        keeper.send(b"to expire")
        assert call(owner, "GET", _path(topic) + "/stats")[1]["subscriptions"]["idle"]["msgBacklog"] > 0
        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/messageTTL", 1)[0] == 204
        took = _within(lambda: call(owner, "GET", _path(topic) + "/stats")[1]["subscriptions"]["idle"]["msgBacklog"] == 0,
                       "the TTL to expire the backlog on the owner")
        print(f"messageTTL live after {took:.2f} s")
        assert call(other, "DELETE", f"/admin/v2/namespaces/{ns}/messageTTL")[0] == 204

        # backlog quota: over the quota, producers are refused with Pulsar's error
        _within(lambda: call(owner, "GET", f"/admin/v2/namespaces/{ns}/messageTTL")[0] == 204, "the TTL removal")
        for _ in range(5):
            keeper.send(b"q" * 100)
        assert call(owner, "GET", _path(topic) + "/stats")[1]["subscriptions"]["idle"]["msgBacklog"] == 5
        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/backlogQuota",
                    {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"})[0] == 204
        took = _within(lambda: _refused(client, topic, pulsar.ProducerBlockedQuotaExceededException),
                       "the backlog quota to reach the owner")
        print(f"backlogQuota live after {took:.2f} s")
    finally:
        client.close()


def test_topic_policies_set_through_another_broker_apply_and_survive_the_owner_stopping(cluster):
    ns, topic = "public/live-topic", "persistent://public/live-topic/t"
    owner, other = _setup(cluster, ns, topic)
    client = _client(owner.service_url)
    try:
        client.subscribe(topic, "idle").close()
        client.create_producer(topic)  # loaded on the owner, one producer connected
        assert call(other, "POST", _path(topic) + "/maxProducers", 1)[0] == 204
        assert call(owner, "GET", _path(topic) + "/maxProducers")[1] == 1
        _within(lambda: _refused(client, topic, pulsar.ProducerBusy), "the topic's limit to reach the owner")
        assert call(other, "POST", f"/admin/v2/namespaces/{ns}/maxProducersPerTopic", 5)[0] == 204
        assert call(other, "GET", _path(topic) + "/maxProducers?applied=true")[1] == 1  # the topic's wins
    finally:
        client.close()

    owner.stop()  # graceful: the other broker takes the topic
    survivor = _client(other.service_url)
    try:
        survivor.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            survivor.create_producer(topic)  # the topic's own limit came with it
        assert call(other, "GET", _path(topic) + "/maxProducers")[1] == 1
    finally:
        survivor.close()
