"""Failover with the broker's defaults: a killed owner's bundle moves in seconds, not after its 30 s session."""

from __future__ import annotations

import asyncio
import time

import pulsar
from kazoo.client import KazooClient

from broker.config import BrokerConfig
from broker.ownership.bundles import NamespaceBundles
from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, may_be_alive
from storage.testing.waiting import wait_until
from tests.cluster.support import Production, client as _client, lookup as _lookup, owner_of, topics_in
from tests.official_client.support import distinct_in_order


def _broker_sessions(metadata_url: str) -> dict[str, int]:
    """Broker id -> the session that holds its registration node."""
    zk = KazooClient(hosts=metadata_url.removeprefix("zk://"))
    zk.start(30)
    try:
        return {b: zk.exists(f"{BROKERS_ROOT}/{b}").ephemeralOwner for b in zk.get_children(BROKERS_ROOT)}
    finally:
        zk.stop()
        zk.close()


def test_kill_9_of_the_owner_with_default_config_fails_over_long_before_the_session_expires(start_brokers,
                                                                                           zookeeper_server):
    brokers = start_brokers(3, default_session=True)
    session_timeout_s = BrokerConfig(metadata_store_url="zk://unused").metadata_session_timeout_s
    assert session_timeout_s == 30.0
    # What ZooKeeper granted each broker's session is the default, not a value clamped to its tick bounds.
    granted = zookeeper_server.granted_session_timeouts_ms()
    sessions = _broker_sessions(brokers[0].metadata_url)
    assert len(sessions) == 3 and {granted.get(s) for s in sessions.values()} == {30_000}

    topic = "persistent://public/default/failover-with-defaults"
    owner = owner_of(brokers, topic)
    survivor = next(b for b in brokers if b is not owner)
    client = _client(survivor.service_url)  # the client enters through a survivor and is redirected to the owner
    try:
        consumer = client.subscribe(topic, "durable")
        production = Production(pulsar, [client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)])
        receipts = production.receipts[0]
        try:
            production.wait_for_more(100, 30, "100 acknowledged sends before the kill")
            old_ledger = receipts[-1][1]
            killed_at = time.monotonic()
            owner.kill9()

            def first_ack_on_the_new_owner():
                # A receipt the old owner sent just before it died can arrive after the kill; it names the old ledger.
                return next((t for t, ledger in list(receipts) if t > killed_at and ledger != old_ledger), None)

            acked_at = wait_until(first_ack_on_the_new_owner, session_timeout_s, "a publish acknowledged by the new owner")
            production.wait_for_more(50, 30, "sends to continue on the new owner")
        finally:
            production.stop()
        takeover_s = acked_at - killed_at
        print(f"kill -9 -> first ack on the new owner: {takeover_s:.2f} s")
        assert takeover_s < session_timeout_s / 3, f"first ack on the new owner {takeover_s:.2f} s after the kill"
        assert _lookup(survivor, topic) != owner.service_url
        assert production.errors == []  # the sends in flight waited for the new owner
        assert distinct_in_order(consumer, production.total()) == production.acked[0]  # every acknowledged one, in order
    finally:
        client.close()


def test_a_paused_broker_is_not_dead_by_probe_and_a_killed_one_is(start_brokers):
    broker = start_brokers(1, default_session=True)[0]
    info = BrokerInfo(f"127.0.0.1:{broker.port}", broker.service_url, broker.web_url)
    assert asyncio.run(may_be_alive(info))
    broker.pause()
    try:
        assert asyncio.run(may_be_alive(info))  # its kernel still accepts: it keeps its bundles until its session expires
    finally:
        broker.resume()
    broker.kill9()
    assert not asyncio.run(may_be_alive(info))


def test_a_broker_restarted_after_kill_9_serves_its_previous_bundles_at_once(start_brokers):
    brokers = start_brokers(2, default_session=True)
    owner, other = brokers
    bundles = NamespaceBundles.equal(4).ranges()
    topics = [topics_in(bundle, 1, "restarted")[0] for bundle in bundles[:2]]
    for topic in topics:
        assert _lookup(owner, topic, authoritative=True) == owner.service_url  # the owner takes both bundles
    owner.kill9()
    owner.start(60)  # same address; its previous session, and that session's nodes, live on for 30 s
    started = time.monotonic()
    client = _client(other.service_url)
    try:
        for topic in topics:
            client.create_producer(topic, send_timeout_millis=60_000).send(b"after the restart")
            assert _lookup(other, topic) == owner.service_url  # it took its own bundles back, nobody else did
    finally:
        client.close()
    assert time.monotonic() - started < 10, "the restarted broker waited for its previous session to expire"
