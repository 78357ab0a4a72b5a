"""A small real cluster for the network and disk fault tests: ZooKeeper, bookies, brokers, all behind the proxy.

``fault_cluster(...)`` starts what the nemesis's cluster starts, with the options the fault kinds need:
the loopback proxy in front of ZooKeeper, every bookie and every broker; bookies in fault-injection mode;
optionally a size-limited filesystem per bookie. The object it returns has the attributes the faults
read (``zookeeper``, ``bookies``, ``brokers``, ``standalone``, ``proxy``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from storage.testing.processes import BookieCluster, BrokerProcess, NetProxyProcess, stop_all

BROKER_SESSION = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}


@dataclass
class FaultCluster:
    zookeeper: object
    bookies: BookieCluster
    proxy: NetProxyProcess | None
    brokers: list[BrokerProcess] = field(default_factory=list)
    standalone: object = None
    busy: set[int] = field(default_factory=set)  # id() of members an active fault holds (as the nemesis's cluster)

    @property
    def metadata_url(self) -> str:
        return self.bookies.metadata_url


@pytest.fixture
def fault_cluster(zookeeper_server, tmp_path):
    started: list[FaultCluster] = []

    def start(bookies: int = 4, brokers: int = 0, proxy: bool = True, disk_limit_bytes: int | None = None,
              fault_injection: bool = True, bookie_env: dict | None = None,
              broker_env: dict | None = None) -> FaultCluster:
        root = tmp_path / f"cluster-{len(started)}"
        root.mkdir()
        chroot = f"/f-{uuid.uuid4().hex[:12]}"
        net = NetProxyProcess(root).start() if proxy else None
        url = net.zookeeper_url(zookeeper_server, chroot) if net else zookeeper_server.url(chroot)
        cluster = FaultCluster(zookeeper_server, BookieCluster(url, root, count=bookies, proxy=net,
                                                               disk_limit_bytes=disk_limit_bytes,
                                                               fault_injection=fault_injection,
                                                               env=dict(bookie_env or {})), net)
        started.append(cluster)
        cluster.bookies.start()
        for i in range(brokers):
            cluster.brokers.append(BrokerProcess(root / f"broker-{i}", metadata_url=url, proxy=net,
                                                 env={**BROKER_SESSION, **(broker_env or {})}))
        for b in cluster.brokers:
            b.spawn()
        for b in cluster.brokers:
            b.wait_healthy(60)
        return cluster

    yield start
    for cluster in started:
        stop_all(cluster.brokers)
        cluster.bookies.stop()
        if cluster.proxy is not None:
            cluster.proxy.stop()
