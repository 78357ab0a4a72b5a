"""Load-balancer leader election on a real ZooKeeper: one leader at a time, and another once its session ends."""

from __future__ import annotations

from broker.ownership.load_manager import LEADER_PATH, LeaderElection
from broker.ownership.ownership import BrokerInfo
from storage.metadata import open_store


def _info(name: str) -> BrokerInfo:
    return BrokerInfo(name, f"pulsar://{name}:6650", f"http://{name}:8080")


async def test_one_leader_and_a_successor_after_resignation_or_expiry(zk_url):
    stores = [await open_store(zk_url, session_timeout_s=4) for _ in range(3)]
    try:
        a, b, c = (LeaderElection(s, _info(name)) for s, name in zip(stores, "abc"))
        assert [await e.is_leader() for e in (a, b, c)] == [True, False, False]
        assert await a.is_leader()  # asking again keeps the lead
        assert (await c.leader()).broker_id == "a"
        await b.resign()  # not the leader: changes nothing
        assert (await a.leader()).broker_id == "a"
        await a.resign()  # graceful: the next round elects another at once
        assert await stores[0].exists(LEADER_PATH) is None
        assert [await e.is_leader() for e in (b, a, c)] == [True, False, False]
        await stores[1].expire_session()  # a crashed leader's node goes with its session
        assert await c.is_leader() and not await b.is_leader()
        assert (await b.leader()).broker_id == "c"
    finally:
        for s in stores:
            await s.close()
