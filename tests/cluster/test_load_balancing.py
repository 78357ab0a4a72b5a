"""Automatic load management on real brokers: a bundle over its topic threshold splits by itself, and the leader
sheds bundles from a loaded broker to an idle one; producers and consumers (the official client) see no error and
lose no acknowledged message. Thresholds and intervals are lowered through MAGNETAR_BROKER_* variables."""

from __future__ import annotations

import collections

import pulsar

from broker.ownership.bundles import NamespaceBundles, bundle_name
from broker.topics.names import parse_topic
from storage.testing.waiting import wait_until
from tests.cluster.support import Production, client, lookup, topics_in
from tests.official_client.support import admin_call, distinct_in_order

BASE = "/admin/v2/namespaces/public/default"
DEFAULT = NamespaceBundles.equal(4)
FAST_REPORTS = {"MAGNETAR_BROKER_LOAD_REPORT_INTERVAL_S": "0.5"}


def _get(broker, path: str) -> dict:
    status, doc = admin_call(broker, "GET", path)
    assert status == 200, doc
    return doc


def _bundles(broker) -> dict:
    return _get(broker, f"{BASE}/bundles")


def _produce_and_consume(url: str, topics: list[str]):
    """(client, consumers, production) with one durable consumer and one steady producer per topic."""
    c = client(url)
    consumers = [c.subscribe(t, "durable") for t in topics]
    production = Production(pulsar, [c.create_producer(t, batching_enabled=False, send_timeout_millis=30_000)
                                     for t in topics])
    return c, consumers, production


def _assert_every_acknowledged_message_arrives(consumers, production) -> None:
    assert production.errors == []
    for consumer, acked in zip(consumers, production.acked):
        assert distinct_in_order(consumer, len(acked)) == acked  # every acknowledged message, in order


def test_a_bundle_over_its_topic_threshold_splits_by_itself_and_clients_keep_working(start_brokers):
    env = {**FAST_REPORTS, "MAGNETAR_BROKER_LOAD_BALANCER_NAMESPACE_BUNDLE_MAX_TOPICS": "5",
           "MAGNETAR_BROKER_LOAD_BALANCER_SPLIT_INTERVAL_S": "0.5",
           "MAGNETAR_BROKER_LOAD_BALANCER_SHEDDING_ENABLED": "false"}
    a, b = start_brokers(2, env)
    hot = DEFAULT.ranges()[1]
    topics = topics_in(hot, 12, "auto-split")
    c, consumers, production = _produce_and_consume(a.service_url, topics)
    try:
        production.wait_for_more(20, 30, "sends on every topic before any split")

        def split_enough():
            bundles = NamespaceBundles.from_json(_bundles(b))  # the other broker reads the stored boundaries
            per_bundle = collections.Counter(bundles.bundle_of(parse_topic(t)) for t in topics)
            return bundles if max(per_bundle.values()) <= 5 else None

        bundles = wait_until(split_enough, 90, "automatic splits until no bundle holds more than 5 of the topics")
        production.wait_for_more(20, 60, "sends on every topic after the splits")
    finally:
        production.stop()
    try:
        assert len(bundles) > 4
        assert set(DEFAULT.boundaries) <= set(bundles.boundaries)  # only the hot bundle was cut ...
        assert all(hot[0] <= x <= hot[1] for x in set(bundles.boundaries) - set(DEFAULT.boundaries))
        assert _bundles(a)["boundaries"] == bundles.to_json()["boundaries"]  # ... and both brokers agree
        owners = {lookup(a, t) for t in topics}
        assert owners <= {a.service_url, b.service_url}  # every topic is served
        _assert_every_acknowledged_message_arrives(consumers, production)
    finally:
        c.close()


def test_the_leader_sheds_bundles_from_a_loaded_broker_to_an_idle_one(start_brokers):
    env = {**FAST_REPORTS, "MAGNETAR_BROKER_LOAD_BALANCER_SHEDDING_INTERVAL_S": "1",
           "MAGNETAR_BROKER_LOAD_BALANCER_SHEDDING_CONDITION_HIT_COUNT_THRESHOLD": "2",
           "MAGNETAR_BROKER_LOAD_BALANCER_BROKER_MAX_MSG_RATE": "100",  # a few hundred msg/s is overload
           "MAGNETAR_BROKER_LOAD_BALANCER_BUNDLE_UNLOAD_MIN_MSG_RATE": "5",
           "MAGNETAR_BROKER_LOAD_BALANCER_SHEDDING_GRACE_PERIOD_S": "600",
           "MAGNETAR_BROKER_LOAD_BALANCER_AUTO_BUNDLE_SPLIT_ENABLED": "false"}
    (leader,) = start_brokers(1, env)  # the lead first, so it unloads through the loaded broker's admin REST
    wait_until(lambda: admin_call(leader, "GET", "/admin/v2/brokers/leaderBroker")[0] == 200, 30, "a leader")
    (loaded,) = start_brokers(1, env, metadata_url=leader.metadata_url)
    for broker in (leader, loaded):
        assert _get(broker, "/admin/v2/brokers/leaderBroker")["serviceUrl"] == leader.web_url
    topics = [topics_in(bundle, 1, "shed")[0] for bundle in DEFAULT.ranges()]
    for t in topics:
        assert lookup(loaded, t, authoritative=True) == loaded.service_url
    assert _bundles(loaded)["owned"] == DEFAULT.names() and _bundles(leader)["owned"] == []
    c, consumers, production = _produce_and_consume(loaded.service_url, topics)
    try:
        wait_until(lambda: _bundles(leader)["owned"], 60, "the leader shedding a bundle of the loaded broker")
        production.wait_for_more(30, 60, "sends on every topic after the shedding")
    finally:
        production.stop()
    try:
        moved, kept = _bundles(leader)["owned"], _bundles(loaded)["owned"]
        assert moved and kept and sorted(moved + kept) == DEFAULT.names()  # the loaded broker kept at least one
        report = _get(leader, "/admin/v2/broker-stats/load-report")
        assert report["bundles"] == [f"public/default/{name}" for name in moved]
        for t in topics:  # the moved bundles' topics are served by the broker that took them
            assert lookup(loaded, t) == (leader if bundle_name(DEFAULT.bundle_of(parse_topic(t))) in moved
                                         else loaded).service_url
        _assert_every_acknowledged_message_arrives(consumers, production)
    finally:
        c.close()
