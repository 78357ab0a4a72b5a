"""Taking a bundle from an owner proven dead, between Ownership objects on a real ZooKeeper (one session each).

The probe is injected (the brokers here are names without processes): ``dead`` names the brokers whose every
advertised port refuses connections. Real processes and kill -9: tests/cluster/test_failover.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, Ownership
from broker.topics.names import parse_topic
from storage.metadata import open_store
from storage.testing.waiting import wait_until_async

TOPIC = parse_topic("persistent://public/default/taken-over")


def _info(name: str) -> BrokerInfo:
    return BrokerInfo(name, f"pulsar://{name}:6650", f"http://{name}:8080")


class Cluster:
    """Ownership objects on their own sessions; ``dead`` is what every probe reports; ``lost`` what each heard."""

    def __init__(self, zk_url: str):
        self.zk_url = zk_url
        self.dead: set[str] = set()
        self.lost: dict[str, list[str]] = {}
        self.stores = []

    async def probe(self, broker: BrokerInfo) -> bool:
        return broker.broker_id not in self.dead

    async def broker(self, name: str, **kwargs) -> Ownership:
        self.stores.append(await open_store(self.zk_url, session_timeout_s=10))
        self.lost[name] = []
        return Ownership(self.stores[-1], _info(name), 4, lambda: None, probe=self.probe,
                         on_bundle_lost=self.lost[name].append, **kwargs)


@pytest.fixture
async def cluster(zk_url):
    c = Cluster(zk_url)
    yield c
    for store in c.stores:
        await store.close()


async def test_a_live_owner_keeps_its_bundle_and_a_dead_one_loses_it_at_once(cluster):
    a, b = await cluster.broker("a"), await cluster.broker("b")
    assert (await a.try_acquire(TOPIC)).broker_id == "a"
    path = await a.path_of(TOPIC)
    assert not await b.free_if_owner_dead(path)  # a answers: it keeps the bundle
    assert (await b.owner_at(path)).broker_id == "a"

    cluster.dead.add("a")  # every advertised port of a refuses now; its session lives on (10 s)
    assert await b.free_if_owner_dead(path)
    assert await b.owner_at(path) is None
    assert (await b.try_acquire(TOPIC)).broker_id == "b"
    _, stat = await b.store.get(path)
    assert stat.ephemeral_owner == b.store.session_id


async def test_an_owner_judged_dead_stops_serving_at_once_and_does_not_take_the_bundle_back(cluster):
    a = await cluster.broker("a", owner_expiry_wait_s=0.3)
    b = await cluster.broker("b")
    await a.try_acquire(TOPIC)
    path = await a.path_of(TOPIC)
    cluster.dead.add("a")  # wrongly: a lives (say its ports refuse b alone)
    assert await b.free_if_owner_dead(path)
    await b.try_acquire(TOPIC)
    # a heard it lost the bundle while its session lived
    await wait_until_async(lambda: cluster.lost["a"] == [path], 10, "broker a to hear it lost the bundle", interval_s=0.02)
    assert not await a.owns(TOPIC)
    assert (await a.try_acquire(TOPIC)).broker_id == "b"  # it does not reload the topic

    cluster.dead = {"b"}  # and when b looks dead to a, a does not strike back within the hold-down
    assert not await a.free_if_owner_dead(path)  # it waits for b's session to expire instead (0.3 s here)
    assert (await a.owner_at(path)).broker_id == "b" and await b.owns(TOPIC)


async def test_a_node_that_changed_hands_during_the_probe_is_decided_afresh(cluster):
    a, b, c = await cluster.broker("a"), await cluster.broker("b"), await cluster.broker("c")
    await a.try_acquire(TOPIC)
    path = await a.path_of(TOPIC)

    async def probe_while_c_takes_over(broker: BrokerInfo) -> bool:
        if broker.broker_id == "a":  # meanwhile c proves a dead, removes its node and owns the bundle
            cluster.dead.add("a")
            assert await c.free_if_owner_dead(path)
            assert (await c.try_acquire(TOPIC)).broker_id == "c"
            return False
        return await cluster.probe(broker)

    b.reachable = probe_while_c_takes_over
    assert not await b.free_if_owner_dead(path)  # the node is c's now, and c is alive: b leaves it alone
    assert (await b.owner_at(path)).broker_id == "c" and await c.owns(TOPIC)


async def test_a_restarted_broker_replaces_its_previous_incarnations_nodes_at_once(cluster):
    old = await cluster.broker("same")
    await old.register()
    await old.try_acquire(TOPIC)
    path = await old.path_of(TOPIC)
    # The same address under a new session, listening on it: the previous process is gone (it never closed its
    # session here, as after kill -9), so its nodes go now, not when its session expires.
    new = await cluster.broker("same", owns_address=True, owner_expiry_wait_s=0.3)
    await new.register()
    _, stat = await new.store.get(f"{BROKERS_ROOT}/same")
    assert stat.ephemeral_owner == new.store.session_id
    assert (await new.try_acquire(TOPIC)).broker_id == "same" and await new.owns(TOPIC)
    data, stat = await new.store.get(path)
    assert stat.ephemeral_owner == new.store.session_id and json.loads(data)["brokerId"] == "same"
