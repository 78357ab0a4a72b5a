"""The cluster the nemesis attacks: real processes from the project's launcher, in a scratch directory.

Default: a ZooKeeper server, 4 bookies over 3 zones and 3 ``broker start`` processes writing with ensemble 3,
write quorum 3, ack quorum 2 -- so one bookie may be out at any time without blocking or risking an
acknowledged entry (write quorum - ack quorum = 1). Session timeouts are short (4 s) so that a SIGSTOP "past the
session timeout" and the failovers it causes fit in a short run. ``standalone=True`` runs one
``broker standalone`` instead (its bookies and metadata store live inside it, so only the process faults that
hit the whole process apply).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from storage.testing.processes import BookieCluster, BrokerProcess, NetProxyProcess, stop_all
from storage.testing.zookeeper import ZooKeeperServer

ZONES = ("zone-a", "zone-b", "zone-c")
SESSION_TIMEOUT_S = 4.0
BOOKIE_DISK_BYTES = 512 * 1024 * 1024  # each bookie's own tmpfs, for the full-disk fault (when mounting is allowed)


class NemesisCluster:
    """``with NemesisCluster(...) as cluster``: started on entry, stopped and its scratch dir removed on exit."""

    def __init__(self, standalone: bool = False, bookies: int = 4, brokers: int = 3, ensemble_size: int = 3,
                 write_quorum: int = 3, ack_quorum: int = 2, root: str | Path | None = None,
                 keep: bool = False):
        if not ack_quorum <= write_quorum <= ensemble_size <= bookies:
            raise ValueError(f"need ack quorum <= write quorum <= ensemble size <= bookies, got "
                             f"{ack_quorum}/{write_quorum}/{ensemble_size}/{bookies}")
        self.standalone_mode = standalone
        self.bookie_count, self.broker_count = bookies, brokers
        self.ensemble_size, self.write_quorum, self.ack_quorum = ensemble_size, write_quorum, ack_quorum
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="magnetar-nemesis-"))
        self.keep = keep
        self.session_timeout_s = SESSION_TIMEOUT_S
        self.zookeeper: ZooKeeperServer | None = None
        self.bookies: BookieCluster | None = None
        self.brokers: list[BrokerProcess] = []
        self.standalone: BrokerProcess | None = None
        self.proxy: NetProxyProcess | None = None  # the fault-injecting loopback proxy in front of every process
        self.replaced_bookies = 0  # bookies lost for good and replaced by new ones
        self.busy: set[int] = set()  # id() of the members an active fault holds

    @property
    def bookie_faults_tolerated(self) -> int:
        """Bookies that may be out at once: each entry still reaches an ack quorum of its write quorum."""
        return 0 if self.standalone_mode else self.write_quorum - self.ack_quorum

    @property
    def bookie_env(self) -> dict[str, str]:
        return {"MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": str(self.session_timeout_s),
                "MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": "30",
                # A lost bookie's fragments of still-open ledgers wait this long before they are re-replicated.
                "MAGNETAR_BOOKIE_OPEN_LEDGER_REREPLICATION_GRACE_PERIOD_S": "5",
                "MAGNETAR_BOOKIE_REPLICATION_POLL_INTERVAL_S": "0.5"}

    @property
    def broker_env(self) -> dict[str, str]:
        return {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": str(self.session_timeout_s),
                "MAGNETAR_BROKER_MANAGED_LEDGER_ENSEMBLE_SIZE": str(self.ensemble_size),
                "MAGNETAR_BROKER_MANAGED_LEDGER_WRITE_QUORUM": str(self.write_quorum),
                "MAGNETAR_BROKER_MANAGED_LEDGER_ACK_QUORUM": str(self.ack_quorum)}

    @property
    def metadata_url(self) -> str | None:
        return self.bookies.metadata_url if self.bookies else None

    @property
    def service_urls(self) -> list[str]:
        return [b.service_url for b in (self.brokers or [self.standalone])]

    @property
    def web_url(self) -> str:
        return (self.brokers or [self.standalone])[0].web_url

    def describe(self) -> str:
        if self.standalone_mode:
            return ("broker standalone (embedded metadata store, 3 bookie processes and a broker worker per core, "
                    "E2/Qw2/Qa2)")
        return (f"ZooKeeper, {self.bookie_count} bookies in {len(ZONES)} zones, {self.broker_count} brokers; "
                f"E{self.ensemble_size}/Qw{self.write_quorum}/Qa{self.ack_quorum}; session timeouts "
                f"{self.session_timeout_s:g} s")

    def start(self) -> "NemesisCluster":
        try:
            if self.standalone_mode:
                # The default deployment, as `make run` starts it: supervisor, bookie processes and a worker per
                # core (a kill -9 of the supervisor takes its children with it: PR_SET_PDEATHSIG).
                self.standalone = BrokerProcess(self.root / "standalone" / "data", workers="default")
                self.standalone.start(timeout_s=90)
                return self
            self.zookeeper = ZooKeeperServer(self.root / "zk").start()
            # Every process is reached through the proxy (ZooKeeper too), so a partition can blackhole any one
            # of them; bookies run in fault-injection mode (slow or failing fsync) on a tmpfs of their own.
            self.proxy = NetProxyProcess(self.root).start()
            self.bookies = BookieCluster(self.proxy.zookeeper_url(self.zookeeper, "/magnetar"), self.root / "bookies",
                                         zones=ZONES, count=self.bookie_count, env=self.bookie_env, proxy=self.proxy,
                                         fault_injection=True, disk_limit_bytes=BOOKIE_DISK_BYTES).start(90)
            self.brokers = [BrokerProcess(self.root / f"broker-{i}", metadata_url=self.metadata_url,
                                          env=dict(self.broker_env), proxy=self.proxy)
                            for i in range(self.broker_count)]
            for b in self.brokers:
                b.spawn()
            for b in self.brokers:
                b.wait_healthy(90)
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        running = [p for p in (*self.brokers, self.standalone) if p is not None and p.proc is not None]
        for process in running:
            process.resume()  # a stopped process ignores SIGTERM until it runs again
        stop_all(running)
        if self.bookies:
            for b in self.bookies.bookies:
                if b.proc is not None:
                    b.resume()
            self.bookies.stop()
        if self.zookeeper:
            self.zookeeper.cleanup()
        if self.proxy is not None:
            self.proxy.stop()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def logs(self) -> list[Path]:
        return sorted(self.root.rglob("*.log"))

    def __enter__(self) -> "NemesisCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
