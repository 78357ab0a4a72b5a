"""Bundle ownership, split and placement between Ownership objects on a real ZooKeeper (one session each)."""

from __future__ import annotations

import asyncio
import collections
import json
import uuid

import pytest

from broker.errors import ServiceNotReadyError
from broker.ownership.bundles import NamespaceBundles, bundle_name
from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, Ownership
from broker.ownership.resources import ConflictError, NotFoundError
from broker.topics.names import parse_topic
from magnetar.topic_name import NamespaceName
from storage.metadata import SessionState, open_store

NS = NamespaceName("public", "default")


def _info(name: str) -> BrokerInfo:
    return BrokerInfo(name, f"pulsar://{name}:6650", f"http://{name}:8080")


async def _alive(broker: BrokerInfo) -> bool:
    return True  # the brokers here are names without processes


def _topic_in(bundle, bundles: NamespaceBundles, prefix: str = "t"):
    for i in range(10_000):
        topic = parse_topic(f"persistent://public/default/{prefix}-{i}")
        if bundles.bundle_of(topic) == bundle:
            return topic
    raise AssertionError(f"no topic hashes into {bundle_name(bundle)}")


@pytest.fixture
async def brokers(zk_url):
    """brokers(n) -> n Ownership objects, each on its own ZooKeeper session, all closed at the end."""
    stores = []

    async def make(n: int, **kwargs) -> list[Ownership]:
        out = []
        for _ in range(n):
            stores.append(await open_store(zk_url, session_timeout_s=4))
            out.append(Ownership(stores[-1], _info(f"b{len(stores) - 1}"), 4, lambda: None, **{"probe": _alive, **kwargs}))
        return out

    yield make
    for store in stores:
        await store.close()


class HeldWrites:
    """A store whose next write to ``path`` waits until the test releases it (the rest goes straight through)."""

    def __init__(self, store, path: str):
        self.store, self.path = store, path
        self.arrived, self.release = asyncio.Event(), asyncio.Event()

    async def set(self, path, data, expected_version=-1):
        if path == self.path and not self.release.is_set():
            self.arrived.set()
            await self.release.wait()
        return await self.store.set(path, data, expected_version)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.mark.parametrize("contenders", [2, 5])
async def test_racing_brokers_end_with_exactly_one_owner(brokers, contenders):
    owners = await brokers(contenders)
    topic = parse_topic("persistent://public/default/raced")
    results = await asyncio.gather(*(o.try_acquire(topic) for o in owners))
    assert len({r.broker_id for r in results}) == 1  # everyone agrees on the one owner
    assert [await o.owns(topic) for o in owners].count(True) == 1
    winner = next(o for o in owners if o.me.broker_id == results[0].broker_id)
    await winner.close()  # a graceful hand-off: the next contender takes it at once
    other = next(o for o in owners if o is not winner)
    assert (await other.try_acquire(topic)).broker_id == other.me.broker_id


async def test_an_expired_session_gives_up_its_bundles(zk_url):
    lost = asyncio.Event()
    store = await open_store(zk_url, session_timeout_s=4)
    other_store = await open_store(zk_url, session_timeout_s=4)
    try:
        mine = Ownership(store, _info("a"), 4, lost.set)
        theirs = Ownership(other_store, _info("b"), 4, lambda: None)
        topic = parse_topic("persistent://public/default/expiring")
        assert (await mine.try_acquire(topic)).broker_id == "a"
        await store.expire_session()
        await asyncio.wait_for(lost.wait(), 15)
        assert not await mine.owns(topic)
        assert (await theirs.try_acquire(topic)).broker_id == "b"
    finally:
        await store.close()
        await other_store.close()


async def test_a_suspended_broker_stops_writes_until_it_has_re_verified_ownership():
    url = f"memory://suspend-{uuid.uuid4().hex[:8]}"
    store, other = await open_store(url), await open_store(url)
    try:
        me = Ownership(store, _info("a"), 4, lambda: None)
        bundles = await me.namespace_bundles(NS)
        kept = _topic_in(bundles.ranges()[0], bundles, "kept")
        taken = _topic_in(bundles.ranges()[1], bundles, "taken")
        await me.try_acquire(kept)
        await me.try_acquire(taken)
        me._session_changed(SessionState.SUSPENDED)  # scripted: the connection dropped
        assert not me.writable
        await store.delete(await me.path_of(taken))  # meanwhile the bundle went to someone else
        await other.create(await me.path_of(taken), json.dumps(_info("b").to_json()).encode(), ephemeral=True)
        me._session_changed(SessionState.CONNECTED)
        await me._verifying
        assert me.writable and await me.owns(kept) and not await me.owns(taken)
    finally:
        await store.close()
        await other.close()


async def test_a_restarted_broker_does_not_adopt_the_node_of_its_previous_session(zk_url):
    old_store, new_store = await open_store(zk_url, session_timeout_s=4), await open_store(zk_url, session_timeout_s=4)
    try:
        old = Ownership(old_store, _info("same"), 4, lambda: None)
        new = Ownership(new_store, _info("same"), 4, lambda: None, owner_expiry_wait_s=0.3)
        topic = parse_topic("persistent://public/default/restarted")
        await old.try_acquire(topic)
        with pytest.raises(ServiceNotReadyError, match="previous session"):
            await new.try_acquire(topic)  # same broker id, other session: it waits for the node to go, not adopt it
        assert not await new.owns(topic)
        new.owner_expiry_wait_s = 15
        acquiring = asyncio.ensure_future(new.try_acquire(topic))
        await old_store.close()  # the previous session ends: its node goes
        assert (await asyncio.wait_for(acquiring, 15)).broker_id == "same" and await new.owns(topic)
        _, stat = await new_store.get(await new.path_of(topic))
        assert stat.ephemeral_owner == new_store.session_id
    finally:
        await old_store.close()
        await new_store.close()


async def test_the_owner_splits_a_bundle_keeps_both_halves_and_every_broker_finds_them(brokers):
    a, b, stale = await brokers(3)
    bundles = await a.namespace_bundles(NS)
    parent = bundles.ranges()[2]
    topic = _topic_in(parent, bundles)
    await stale.namespace_bundles(NS)  # cached before the split
    assert (await a.try_acquire(topic)).broker_id == "b0"
    low_path, high_path = await a.split(NS, parent)
    stored = await b.namespace_bundles(NS, fresh=True)
    assert len(stored) == 5 and parent not in stored
    assert {low_path, high_path} <= a.owned and a.bundle_path(NS, parent) not in a.owned
    assert await a.store.exists(a.bundle_path(NS, parent)) is None
    assert (await b.owner_of(topic)).broker_id == "b0"  # re-read on an ownership miss
    # A broker still holding the old boundaries creates the parent's node, sees they moved, and lets it go.
    assert (await stale.try_acquire(topic)).broker_id == "b0"
    assert await a.store.exists(a.bundle_path(NS, parent)) is None
    assert await a.owns(topic) and not await stale.owns(topic)


async def test_concurrent_splits_on_two_brokers_both_land(zk_url):
    store_a, store_b = await open_store(zk_url, session_timeout_s=4), await open_store(zk_url, session_timeout_s=4)
    try:
        held = HeldWrites(store_a, "/admin/local-policies/public/default")
        a = Ownership(held, _info("a"), 4, lambda: None)
        b = Ownership(store_b, _info("b"), 4, lambda: None)
        bundles = await a.namespace_bundles(NS)
        first, second = bundles.ranges()[0], bundles.ranges()[3]
        await a.try_acquire(_topic_in(first, bundles))
        await b.try_acquire(_topic_in(second, bundles))
        await b.split(NS, second)  # stores the boundaries: later writes are conditional sets
        splitting = asyncio.ensure_future(a.split(NS, first))
        await asyncio.wait_for(held.arrived.wait(), 10)  # a has read version v and is about to write v+1
        await b.split(NS, (await b.namespace_bundles(NS)).ranges()[-1])  # b writes v+1 first
        held.release.set()
        await asyncio.wait_for(splitting, 10)  # a's write fails on version; a re-reads and splits again
        final = await b.namespace_bundles(NS, fresh=True)
        assert len(final) == 7 and first not in final and second not in final
        owners = collections.Counter()
        for bundle in final.ranges():
            owner = await a.owner_at(a.bundle_path(NS, bundle))
            owners[owner.broker_id if owner else None] += 1
        assert owners == {"a": 2, "b": 3, None: 2}
        assert len(a.owned) == 2 and len(b.owned) == 3
    finally:
        await store_a.close()
        await store_b.close()


async def test_two_splits_of_the_same_bundle_split_it_once(brokers):
    (a,) = await brokers(1)
    bundles = await a.namespace_bundles(NS)
    await a.try_acquire(_topic_in(bundles.ranges()[0], bundles))
    results = await asyncio.gather(a.split(NS, bundles.ranges()[0]), a.split(NS, bundles.ranges()[0]),
                                   return_exceptions=True)
    assert sum(isinstance(r, tuple) for r in results) == 1
    assert isinstance(next(r for r in results if not isinstance(r, tuple)), NotFoundError)
    assert len(await a.namespace_bundles(NS, fresh=True)) == 5


async def test_split_refuses_a_bundle_it_does_not_own_or_that_is_not_a_bundle(brokers):
    a, b = await brokers(2)
    bundles = await a.namespace_bundles(NS)
    await b.try_acquire(_topic_in(bundles.ranges()[0], bundles))
    with pytest.raises(ConflictError, match="not owned by broker b0"):
        await a.split(NS, bundles.ranges()[0])
    with pytest.raises(NotFoundError, match="not a bundle of public/default"):
        await b.split(NS, (0, 0x20000000))
    assert len(await a.namespace_bundles(NS, fresh=True)) == 4


async def test_lookups_spread_bundles_evenly_over_three_brokers(brokers):
    owners = await brokers(3)
    for o in owners:
        await o.register()
    by_id = {o.me.broker_id: o for o in owners}
    namespaces = [NamespaceName("public", f"ns{i}") for i in range(3)]  # 3 x 4 bundles
    for i, ns in enumerate(namespaces):
        bundles = NamespaceBundles.equal(4)
        for bundle in bundles.ranges():
            topic = parse_topic(f"persistent://{ns}/{_topic_in(bundle, bundles).local_name}")
            entry = owners[i % 3]  # the lookup arrives anywhere
            chosen = await entry.place(entry.bundle_path(ns, bundle))
            assert (await by_id[chosen.broker_id].try_acquire(topic)).broker_id == chosen.broker_id
            await by_id[chosen.broker_id].report_load()  # its report shows the new bundle
    assert sorted(len(o.owned) for o in owners) == [4, 4, 4]
    reports = {info.broker_id: report for info, report in await owners[0].live_brokers()}
    assert {b: len(r.bundles) for b, r in reports.items()} == {"b0": 4, "b1": 4, "b2": 4}
    assert (await owners[0].store.children(BROKERS_ROOT)) == ["b0", "b1", "b2"]


async def test_placement_passes_over_a_broker_that_refuses_connections(brokers):
    dead = "b2"

    async def probe(broker: BrokerInfo) -> bool:
        return broker.broker_id != dead  # killed: its report lingers until its session expires

    owners = await brokers(3, probe=probe)
    for o in owners:
        await o.register()
    await owners[0].try_acquire(parse_topic("persistent://public/default/loaded"))
    await owners[0].report_load()  # b0 has a bundle: b1 and the dead b2 have none
    chosen = [(await owners[0].place(f"/namespace/public/other/0x{i:08x}_0x{i + 1:08x}")).broker_id for i in range(6)]
    assert dead not in chosen and set(chosen) == {"b0", "b1"}


async def test_a_bundle_being_unloaded_loads_no_topic_until_it_is_released(brokers):
    old, new = await brokers(2)
    topic = parse_topic("persistent://public/default/unloading")
    assert (await old.try_acquire(topic)).broker_id == "b0"
    path = await old.path_of(topic)
    old.disable(path)  # the unload has begun: its topics are closing, the node is still ours
    assert not await old.owns(topic)
    with pytest.raises(ServiceNotReadyError, match="being unloaded"):
        await old.try_acquire(topic)  # a client reconnecting meanwhile does not reload it here
    with pytest.raises(ConflictError):
        await old.split(NS, (await old.namespace_bundles(NS)).bundle_of(topic))
    assert (await new.try_acquire(topic)).broker_id == "b0"  # still one owner until the release
    await old.release(path)
    assert old.unloading == set()
    assert (await new.try_acquire(topic)).broker_id == "b1"
