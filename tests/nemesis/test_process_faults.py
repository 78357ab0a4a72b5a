"""Each process fault really happens, and its heal really brings the target back (real processes).

One small nemesis cluster for the module (ZooKeeper, 4 bookies, 2 brokers, E3/Qw3/Qa2) with a topic being
written, so the lost bookie holds fragments that recovery must move.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pulsar
import pytest

from loadtest.nemesis.cluster import NemesisCluster
from loadtest.nemesis.process_faults import (BOOKIES_ROOT, BROKERS_ROOT, KillBookie, KillBroker, LoseBookie,
                                             PauseBookie, PauseBroker, ZooKeeperOutage, registered)
from storage.autorecovery.admin import ledgers_on
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.testing.waiting import wait_until
from storage.testing.zookeeper import four_letter


@pytest.fixture(scope="module")
def cluster():
    with NemesisCluster(bookies=4, brokers=2) as c:
        client = pulsar.Client(c.service_urls[0], operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        producer = client.create_producer("persistent://public/default/process-faults", batching_enabled=False)
        for i in range(50):
            producer.send(f"{i}".encode())
        c.client = client
        yield c
        client.close()


def _state(proc) -> str:
    """The process's scheduler state from /proc: 'T' when stopped by SIGSTOP."""
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_kill_bookie_kills_one_and_heal_restarts_it_on_the_same_identity(cluster):
    fault = KillBookie()
    hit = fault.inject(cluster, random.Random(1))
    assert [b.name for b in cluster.bookies.bookies if not b.alive] == [hit.target]
    fault.heal(cluster)
    assert all(b.alive and b.is_healthy() for b in cluster.bookies.bookies) and not cluster.busy


def test_kill_broker_kills_one_and_heal_restarts_it(cluster):
    fault = KillBroker()
    hit = fault.inject(cluster, random.Random(2))
    assert [b.name for b in cluster.brokers if not b.alive] == [hit.target]
    fault.heal(cluster)
    assert all(b.alive and b.is_healthy() for b in cluster.brokers)


@pytest.mark.parametrize("kind,root", [(PauseBroker, BROKERS_ROOT), (PauseBookie, BOOKIES_ROOT)])
def test_a_pause_lasts_until_the_session_expired_and_heal_resumes_and_reregisters(cluster, kind, root):
    fault = kind()
    fault.inject(cluster, random.Random(3))
    target = fault.target
    path = fault.registration(target)
    wait_until(lambda: _state(target.proc) == "T", 10, "SIGSTOP to take effect")  # signals arrive asynchronously
    assert registered(cluster, path)
    fault.heal(cluster)  # returns only after the session expired, then the process came back
    assert _state(target.proc) != "T" and registered(cluster, path) and target.is_healthy()
    assert path.startswith(root)


def test_zookeeper_outage_stops_zookeeper_and_heal_starts_it_again(cluster):
    fault = ZooKeeperOutage()
    fault.inject(cluster, random.Random(4))
    assert four_letter(cluster.zookeeper.port, "ruok") is None
    fault.heal(cluster)
    assert four_letter(cluster.zookeeper.port, "ruok") == "imok"


def test_lose_bookie_wipes_it_replaces_it_and_heal_moves_every_fragment_it_held(cluster):
    fault = LoseBookie()
    fault.inject(cluster, random.Random(5))
    lost, replacement = fault.lost, fault.replacement
    assert not lost.alive and not Path(lost.data_dir).exists()
    assert replacement in cluster.bookies.bookies and lost not in cluster.bookies.bookies
    assert replacement.zone == lost.zone and replacement.bookie_id != lost.bookie_id

    async def held_by_lost() -> list[int]:
        async with await LedgerClient.open(cluster.metadata_url, ClientConfig(read_timeout_s=5.0)) as client:
            return await ledgers_on(client, lost.bookie_id)

    fault.heal(cluster)
    assert replacement.is_healthy() and registered(cluster, f"{BOOKIES_ROOT}/{replacement.bookie_id}")
    assert asyncio.run(held_by_lost()) == []
    cluster.client.create_producer("persistent://public/default/process-faults").send(b"after the loss")
