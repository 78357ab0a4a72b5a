"""Bundles as pure arithmetic, and two brokers racing for one bundle on a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from broker.ownership import HASH_SPACE, BrokerInfo, Ownership, bundle_of, bundle_path, bundle_ranges
from broker.topics.names import parse_topic
from storage.metadata import open_store


def test_bundle_ranges_cover_the_hash_space_without_gaps():
    ranges = bundle_ranges(4)
    assert ranges[0][0] == 0 and ranges[-1][1] == HASH_SPACE
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_topics_spread_over_bundles_and_partitions_hash_separately():
    topics = [parse_topic(f"t{i}") for i in range(200)]
    assert len({bundle_of(t, 4) for t in topics}) == 4
    assert bundle_path(parse_topic("persistent://a/b/x"), 4).startswith("/namespace/a/b/0x")
    parts = {bundle_of(parse_topic("orders").partition(i), 4) for i in range(16)}
    assert len(parts) > 1


@pytest.mark.parametrize("contenders", [2, 5])
async def test_racing_brokers_end_with_exactly_one_owner(zk_url, contenders):
    stores = [await open_store(zk_url, session_timeout_s=4) for _ in range(contenders)]
    try:
        owners = [Ownership(s, BrokerInfo(f"b{i}", f"pulsar://b{i}:6650", f"http://b{i}:8080"), 4, lambda: None)
                  for i, s in enumerate(stores)]
        topic = parse_topic("persistent://public/default/raced")
        results = await asyncio.gather(*(o.try_acquire(topic) for o in owners))
        winners = {r.broker_id for r in results}
        assert len(winners) == 1  # everyone agrees on the one owner
        assert sum(o.owns(topic) for o in owners) == 1
        winner = next(o for o in owners if o.owns(topic))
        await winner.release_all()  # a graceful hand-off: the next contender takes it at once
        other = next(o for o in owners if o is not winner)
        assert (await other.try_acquire(topic)).broker_id == other.me.broker_id
    finally:
        for s in stores:
            await s.close()


async def test_an_expired_session_gives_up_its_bundles(zk_url):
    lost = asyncio.Event()
    store = await open_store(zk_url, session_timeout_s=4)
    other_store = await open_store(zk_url, session_timeout_s=4)
    try:
        mine = Ownership(store, BrokerInfo("a", "pulsar://a:1", "http://a:2"), 4, lost.set)
        theirs = Ownership(other_store, BrokerInfo("b", "pulsar://b:1", "http://b:2"), 4, lambda: None)
        topic = parse_topic("persistent://public/default/expiring")
        assert (await mine.try_acquire(topic)).broker_id == "a"
        await store.expire_session()
        await asyncio.wait_for(lost.wait(), 15)
        assert not mine.owns(topic)
        assert (await theirs.try_acquire(topic)).broker_id == "b"
    finally:
        await store.close()
        await other_store.close()


async def test_a_suspended_broker_stops_writes_until_it_has_re_verified_ownership():
    import uuid

    from storage.metadata import SessionState

    store = await open_store(f"memory://suspend-{uuid.uuid4().hex[:8]}")
    try:
        me = Ownership(store, BrokerInfo("a", "pulsar://a:1", "http://a:2"), 4, lambda: None)
        kept, taken = parse_topic("persistent://public/default/kept"), None
        for i in range(50):  # a topic in another bundle, to be "taken" while we are suspended
            candidate = parse_topic(f"persistent://public/default/other-{i}")
            if me.path_of(candidate) != me.path_of(kept):
                taken = candidate
                break
        await me.try_acquire(kept)
        await me.try_acquire(taken)
        me._session_changed(SessionState.SUSPENDED)  # scripted: the connection dropped
        assert not me.writable
        await store.delete(me.path_of(taken))  # meanwhile the bundle went to someone else
        await store.create(me.path_of(taken), b'{"brokerId": "b", "nativeUrl": "pulsar://b:1", "httpUrl": "http://b:2"}')
        me._session_changed(SessionState.CONNECTED)
        await me._verifying
        assert me.writable and me.owns(kept) and not me.owns(taken)
    finally:
        await store.close()
