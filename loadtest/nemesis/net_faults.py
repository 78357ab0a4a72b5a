"""Network faults: a partition that cuts one broker or one bookie off from everyone else.

The cluster puts a fault-injecting TCP proxy (storage/testing/netproxy.py) in
front of every bookie, broker and ZooKeeper (``cluster.proxy``, a
``NetProxyProcess``; the processes advertise their proxy links). Isolating a
process blackholes its links and every connection it opened: packets are
dropped, not refused -- sockets stay open and silent, so every side finds out
only through its own timeouts, as in a real partition. The isolated process
loses ZooKeeper too, so its session expires: a bookie drops out of
``/ledgers/available`` and writers replace it in their ensembles; a broker
loses its bundles, another broker takes them and fences its ledgers.

Why a proxy rather than network namespaces: it needs no root, carries only
loopback traffic, keeps each server's address across restarts, and can tell
one client process's connections from another's (docs/nemesis.md).
"""

from __future__ import annotations

import random

from kazoo.client import KazooClient

from loadtest.nemesis.fault import Fault, Injected
from storage.testing.waiting import wait_until

HEAL_TIMEOUT_S = 60.0
BROKERS_ROOT = "/loadbalance/brokers"  # DESIGN.md's metadata layout, under the cluster's chroot
BOOKIES_ROOT = "/ledgers/available"


def _proxy(cluster):
    return getattr(cluster, "proxy", None)


def _bookies(cluster) -> list:
    bookies = getattr(cluster, "bookies", None)
    return list(bookies.bookies) if bookies is not None else []


def _registered(cluster, path: str) -> bool:
    """Whether ``path`` (under the cluster's chroot) exists in ZooKeeper now. (process_faults.registered does
    the same for the process faults; one of the two can go once both modules are on main.)"""
    zk = KazooClient(hosts=cluster.metadata_url.removeprefix("zk://"), timeout=5)
    zk.start(10)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


class _Partition(Fault):
    """Isolate one process chosen from ``_candidates``; heal lifts exactly that isolation and waits until the
    process is back in the cluster: serving, and registered again in ZooKeeper (its session expired while it
    was cut off)."""

    def __init__(self, target=None):
        self.target = target  # a given process (tests), else one drawn at injection
        self.name = ""

    def _candidates(self, cluster) -> list:
        raise NotImplementedError

    def _registration(self, process) -> str:
        raise NotImplementedError

    def applicable(self, cluster) -> bool:
        proxy = _proxy(cluster)
        return proxy is not None and any(getattr(p, "proxy", None) is proxy for p in self._candidates(cluster))

    def inject(self, cluster, rng: random.Random) -> Injected:
        proxy = _proxy(cluster)
        busy = getattr(cluster, "busy", set())  # members another active fault holds
        candidates = [p for p in self._candidates(cluster)
                      if p.alive and getattr(p, "proxy", None) is proxy and id(p) not in busy]
        if self.target is not None:
            candidates = [p for p in candidates if p is self.target]
        if not candidates:
            raise RuntimeError(f"{self.kind}: no free live process behind the proxy to isolate")
        self.target = rng.choice(candidates)
        busy.add(id(self.target))
        self.name = self.target.name
        rules = proxy.isolate(self.target)
        return Injected(self.kind, self.name, f"blackholed links {', '.join(self._links())} and every connection "
                        f"from pid {self.target.proc.pid}; {len(rules['rules']['pids'])} process(es) isolated now")

    def _links(self) -> list[str]:
        return list(getattr(self.target, "link_names", None) or [self.target.link_name])

    def heal(self, cluster) -> None:
        if self.target is None:
            return
        try:
            _proxy(cluster).rejoin(self.target)
            if self.target.alive:
                self.target.wait_healthy(HEAL_TIMEOUT_S)
                path = self._registration(self.target)
                wait_until(lambda: _registered(cluster, path), HEAL_TIMEOUT_S,
                           f"{self.target.name} to register again after the partition", interval_s=0.25)
        finally:
            getattr(cluster, "busy", set()).discard(id(self.target))


class PartitionBookie(_Partition):
    kind = "partition-bookie"
    bookie_faults = 1

    def _candidates(self, cluster) -> list:
        return _bookies(cluster)

    def _registration(self, process) -> str:
        return f"{BOOKIES_ROOT}/{process.bookie_id}"


class PartitionBroker(_Partition):
    kind = "partition-broker"
    broker_faults = 1

    def _candidates(self, cluster) -> list:
        brokers = list(getattr(cluster, "brokers", None) or [])
        return brokers if len(brokers) >= 2 else []  # someone must be left to take the bundles over

    def _registration(self, process) -> str:
        # A broker whose session expired registers again at its next load report (load_report_interval_s).
        return f"{BROKERS_ROOT}/127.0.0.1:{process.port}"


NET_FAULTS: list[type[Fault]] = [PartitionBookie, PartitionBroker]
