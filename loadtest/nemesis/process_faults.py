"""Process faults: kill -9 and restart, SIGSTOP past the session timeout, a ZooKeeper outage, a lost bookie.

Each picks its target with the schedule's seeded generator among the members no other active fault holds
(``cluster.busy``), so two faults never fight over one process. ``heal`` brings the target back and waits,
with a deadline, until it serves again: a restarted process answers /health; a paused one is resumed only
after ZooKeeper has expired its session (its registration node is gone -- that is what "past the session
timeout" means, observed rather than assumed); a lost bookie's replacement is up and every fragment the lost
one held is re-replicated (``bookie shell recover``).
"""

from __future__ import annotations

import random
import shutil
import subprocess

from kazoo.client import KazooClient

from loadtest.nemesis.fault import Fault, Injected
from storage.testing.processes import VENV_BIN, BookieProcess
from storage.testing.waiting import wait_until

RESTART_TIMEOUT_S = 90.0
# Re-replication copies every entry the lost bookie held: after 100 rounds that is tens of ledgers and thousands
# of entries, minutes on a shared 2-core machine (seed 7 timed out at 180 s while still making progress).
RECOVER_TIMEOUT_S = 600.0
BROKERS_ROOT = "/loadbalance/brokers"  # DESIGN.md's metadata layout; chrooted under the cluster's path
BOOKIES_ROOT = "/ledgers/available"


def _pick(cluster, members: list, rng: random.Random):
    free = [m for m in members if id(m) not in cluster.busy]
    if not free:
        raise RuntimeError("no member left to fault (the schedule should have prevented this)")
    target = rng.choice(free)
    cluster.busy.add(id(target))
    return target


def _release(cluster, target) -> None:
    cluster.busy.discard(id(target))


def registered(cluster, path: str) -> bool:
    """Whether ``path`` (under the cluster's chroot) exists in ZooKeeper right now."""
    zk = KazooClient(hosts=cluster.metadata_url.removeprefix("zk://"), timeout=5)
    zk.start(10)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


class _Kill(Fault):
    """kill -9, then (at heal) start again on the same ports and data."""

    def members(self, cluster) -> list:
        raise NotImplementedError

    def inject(self, cluster, rng: random.Random) -> Injected:
        self.target = _pick(cluster, self.members(cluster), rng)
        self.target.kill9()
        return Injected(self.kind, self.target.name)

    def heal(self, cluster) -> None:
        try:
            self.target.start(RESTART_TIMEOUT_S)
        finally:
            _release(cluster, self.target)


class KillBookie(_Kill):
    kind = "kill-bookie"
    bookie_faults = 1

    def applicable(self, cluster) -> bool:
        return cluster.bookies is not None

    def members(self, cluster) -> list:
        return cluster.bookies.bookies


class KillBroker(_Kill):
    kind = "kill-broker"
    broker_faults = 1

    def applicable(self, cluster) -> bool:
        return len(cluster.brokers) > 1

    def members(self, cluster) -> list:
        return cluster.brokers


class KillStandalone(_Kill):
    kind = "kill-standalone"
    broker_faults = 1
    bookie_faults = 0  # its bookies die with it, but all at once and come back with their journals

    def applicable(self, cluster) -> bool:
        return cluster.standalone is not None

    def members(self, cluster) -> list:
        return [cluster.standalone]


class _PausePastSession(Fault):
    """SIGSTOP; heal waits until ZooKeeper dropped the process's registration (its session expired), then
    SIGCONT and waits for it to serve again."""

    def members(self, cluster) -> list:
        raise NotImplementedError

    def registration(self, target) -> str:
        raise NotImplementedError

    def inject(self, cluster, rng: random.Random) -> Injected:
        self.target = _pick(cluster, self.members(cluster), rng)
        self.target.pause()
        return Injected(self.kind, self.target.name, f"until its session ({cluster.session_timeout_s:g} s) expires")

    def heal(self, cluster) -> None:
        path = self.registration(self.target)
        try:
            wait_until(lambda: not registered(cluster, path), cluster.session_timeout_s * 5,
                       f"ZooKeeper to expire the session of paused {self.target.name}", interval_s=0.25)
        finally:
            self.target.resume()
        try:
            self.target.wait_healthy(RESTART_TIMEOUT_S)
            wait_until(lambda: registered(cluster, path), RESTART_TIMEOUT_S,
                       f"{self.target.name} to register again", interval_s=0.25)
        finally:
            _release(cluster, self.target)


class PauseBroker(_PausePastSession):
    kind = "pause-broker"
    broker_faults = 1

    def applicable(self, cluster) -> bool:
        return len(cluster.brokers) > 1

    def members(self, cluster) -> list:
        return cluster.brokers

    def registration(self, target) -> str:
        return f"{BROKERS_ROOT}/127.0.0.1:{target.port}"


class PauseBookie(_PausePastSession):
    kind = "pause-bookie"
    bookie_faults = 1

    def applicable(self, cluster) -> bool:
        return cluster.bookies is not None

    def members(self, cluster) -> list:
        return cluster.bookies.bookies

    def registration(self, target) -> str:
        return f"{BOOKIES_ROOT}/{target.bookie_id}"


class ZooKeeperOutage(Fault):
    """ZooKeeper killed (SIGKILL); heal starts it again on the same port and data."""

    kind = "zookeeper-outage"
    exclusive = True  # alone in its round: the pause faults' heal needs ZooKeeper to expire sessions

    def applicable(self, cluster) -> bool:
        return cluster.zookeeper is not None

    def inject(self, cluster, rng: random.Random) -> Injected:
        cluster.zookeeper.stop(kill=True)
        return Injected(self.kind, "zookeeper")

    def heal(self, cluster) -> None:
        cluster.zookeeper.start(RESTART_TIMEOUT_S)


class LoseBookie(Fault):
    """A bookie lost for good: kill -9, its data directory wiped, and a new bookie (new identity, same zone)
    started in its place. Heal re-replicates every fragment the lost one held (``bookie shell recover``) and
    waits until that finishes, so a later fault never meets a ledger still short of a copy."""

    kind = "lose-bookie"
    bookie_faults = 1

    def applicable(self, cluster) -> bool:
        return cluster.bookies is not None

    def inject(self, cluster, rng: random.Random) -> Injected:
        lost = _pick(cluster, cluster.bookies.bookies, rng)
        lost.kill9()
        lost.unmount_disk()
        shutil.rmtree(lost.data_dir, ignore_errors=True)
        cluster.replaced_bookies += 1
        index = cluster.bookies.bookies.index(lost)
        replacement = BookieProcess(
            cluster.metadata_url, cluster.root / "bookies" / f"replacement-{cluster.replaced_bookies}" / "data",
            zone=lost.zone, upgrade_domain=lost.upgrade_domain, extra_args=list(lost.extra_args), env=dict(lost.env),
            proxy=lost.proxy, disk_limit_bytes=lost.disk_limit_bytes, fault_injection=lost.fault_injection)
        cluster.bookies.bookies[index] = replacement
        cluster.busy.add(id(replacement))
        _release(cluster, lost)
        self.lost, self.replacement = lost, replacement
        return Injected(self.kind, lost.name, f"data wiped; replaced by a new bookie in {lost.zone}")

    def heal(self, cluster) -> None:
        try:
            self.replacement.start(RESTART_TIMEOUT_S)
            done = subprocess.run(
                [str(VENV_BIN / "bookie"), "--log-level", "WARNING", "shell", "recover", self.lost.bookie_id,
                 "--metadata-store", cluster.metadata_url, "--timeout-s", str(RECOVER_TIMEOUT_S)],
                capture_output=True, text=True, timeout=RECOVER_TIMEOUT_S + 30)
            if done.returncode != 0:
                raise RuntimeError(f"recovering {self.lost.bookie_id} failed ({done.returncode}): "
                                   f"{done.stdout[-1000:]}{done.stderr[-1000:]}")
        finally:
            _release(cluster, self.replacement)


PROCESS_FAULTS: list[type[Fault]] = [KillBookie, KillBroker, KillStandalone, PauseBroker, PauseBookie,
                                     ZooKeeperOutage, LoseBookie]
