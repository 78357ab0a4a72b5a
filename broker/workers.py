"""The multi-process standalone: a small cluster on one machine behind one advertised address.

How this works. ``broker standalone --workers N --bookies B`` runs a supervisor
(this process) and B + N children (B defaults to 3):

* the supervisor holds the embedded ``file://DATA/metadata`` tree (its flock
  keeps every other process out) and serves it to its children on a Unix
  socket (storage/metadata/served.py): each child's connection is one
  session, with ZooKeeper's versions, ephemerals and watches;
* B bookie processes, ids ``standalone-bookie-<letter>`` and data dirs
  ``DATA/bookie-<letter>`` as in the single-process mode, so cookies and data
  carry over between the modes and across restarts;
* N broker workers, each a full broker of the cluster: it registers under
  ``/loadbalance/brokers``, owns bundles by ephemeral nodes and fences the
  ledgers of a bundle it takes over -- the same ownership code a cluster of
  machines runs, so one writer per topic holds between workers as between
  hosts. Worker 0 listens on the configured ports (6650, 8080, 4181);
  workers 1..N-1 on their own loopback-chosen ports, kept for the
  supervisor's lifetime. A client dials worker 0, whose lookup (binary
  LOOKUP or HTTP) redirects it to the owner of its topic's bundle, as Pulsar
  brokers redirect between hosts. Only worker 0 serves the Stream API.

Why per-worker ports and not SO_REUSEPORT: with one shared port the kernel
spreads connections by a hash, so most of them land on a worker that does
not own the topic, and the redirect must still name a port only the owner
listens on. A redirect to a per-worker port is what every Pulsar client
already follows, costs one lookup per topic, and keeps each connection on
the process that owns its topic.

Children run in their own sessions (Ctrl-C reaches only the supervisor, which
stops them in order: workers, then bookies, then the metadata server) and
ask the kernel for SIGKILL should the supervisor die (``PR_SET_PDEATHSIG``),
so none outlives it. A child that exits on its own is reported and restarted
after ``restart_delay_s``; meanwhile its metadata session is gone with its
socket, so the other workers take its bundles at the next lookup.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pickle
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from broker.config import BrokerConfig
from broker.errors import BrokerError
from broker.standalone_layout import (DEFAULT_BOOKIES, HeldPorts, check_bookie_count, metadata_url, pick_distinct,
                                      standalone_bookie_configs)
from storage.bookie.config import BookieConfig

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 20.0  # a child given SIGTERM that has not exited by then gets SIGKILL
START_TIMEOUT_S = 120.0
MAX_WORKERS = 64
FIRST_RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0
STABLE_RUN_S = 60.0  # a child that ran this long before dying is restarted at once, as after a first failure
SMALL_ADD_BEACON = "small-adds.beacon"  # in the data directory: the workers' shared SmallAddBeacon


def missing_bookie_dirs(data_dir: Path, count: int) -> list[str]:
    """Bookie data directories of an earlier run with more bookies than ``count``: their ledgers' replicas there
    are out of reach this run."""
    return sorted(p.name for p in data_dir.glob("bookie-?")
                  if p.is_dir() and p.name[-1].isalpha() and ord(p.name[-1]) - ord("a") >= count)


def default_workers() -> int:
    """The cores this process may run on: each worker is one Python event loop, so one per core uses them all.
    Bookies mostly wait for fsync and share the cores with the workers."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def workers_for(config: BrokerConfig, cores: int) -> tuple[int, str | None]:
    """The worker count when none was asked for: one per core, or 1 (and why) for a config only one broker can
    serve -- advertised listeners name one broker's ports, and a port of 0 leaves the advertised port unknown."""
    if config.advertised_listeners:
        return 1, "advertisedListeners names one broker's ports"
    if 0 in (config.port, config.http_port, config.tls_port, config.https_port):
        return 1, "a port of 0 (any) leaves the cluster's advertised port unknown"
    return max(1, cores), None


def plan_workers(config: BrokerConfig, count: int, metadata_url: str, pick_port: Callable[[], int],
                 avoid: Iterable[int] = (), small_add_beacon_path: str | None = None) -> list[BrokerConfig]:
    """The config of each of ``count`` workers: worker 0 keeps the configured listeners, the others get ports from
    ``pick_port`` for each listener that is on, and no Stream API. Every port of the plan is distinct, and none is
    in ``avoid`` (the bookies'): a pick that repeats one is discarded. Several workers share
    ``small_add_beacon_path``, if given (storage/client/pacing.py). Raises ValueError for a plan that cannot
    work."""
    if not 1 <= count <= MAX_WORKERS:
        raise ValueError(f"--workers must be between 1 and {MAX_WORKERS}, not {count}")
    if count > 1 and config.advertised_listeners:
        raise ValueError("advertisedListeners names one broker's ports; with it, run --workers 1 or --single-process")
    if count > 1 and 0 in (config.port, config.http_port, config.tls_port, config.https_port):
        raise ValueError("port 0 (any) cannot be the cluster's advertised port with several workers; name the port")
    taken = {p for p in (config.port, config.http_port, config.tls_port, config.https_port, config.stream_port,
                         *avoid) if p}

    def own(port: int | None) -> int | None:
        return None if port is None else pick_distinct(pick_port, taken)

    plans = [dataclasses.replace(config, metadata_store_url=metadata_url)]
    for _ in range(1, count):
        plans.append(dataclasses.replace(
            config, metadata_store_url=metadata_url, port=own(config.port), http_port=own(config.http_port),
            tls_port=own(config.tls_port), https_port=own(config.https_port), stream_port=None, metrics_worker_urls=()))
    if count > 1:  # the advertised /metrics is worker 0's: it merges the others' (broker/http/workers_metrics.py)
        plans[0] = dataclasses.replace(plans[0], metrics_worker_urls=tuple(
            url for p in plans[1:] if (url := p.web_service_url or p.web_service_url_tls)))
    if count > 1 and small_add_beacon_path:
        plans = [dataclasses.replace(p, small_add_beacon_path=small_add_beacon_path) for p in plans]
    return plans


def restart_delay_s(previous_delay_s: float | None, ran_for_s: float) -> float:
    """How long to wait before restarting a child that exited after running ``ran_for_s``: at once-ish after a
    long run, doubling (to a cap) while it keeps dying young, so a child that cannot start does not spin."""
    if previous_delay_s is None or ran_for_s >= STABLE_RUN_S:
        return FIRST_RESTART_DELAY_S
    return min(previous_delay_s * 2, MAX_RESTART_DELAY_S)


def socket_path(data_dir: Path) -> Path:
    """``DATA/metadata.sock``, or a private temporary directory's when that path is too long for a Unix socket."""
    from storage.metadata.served import MAX_SOCKET_PATH_BYTES

    path = data_dir / "metadata.sock"
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
        return path
    return Path(tempfile.mkdtemp(prefix="magnetar-")) / "metadata.sock"


@dataclass
class Child:
    """One supervised process: what it runs (``kind``, ``config``) and its current incarnation."""

    name: str
    kind: str  # "bookie" or "broker"
    config: BookieConfig | BrokerConfig
    proc: asyncio.subprocess.Process | None = None
    ready: asyncio.Future | None = None
    ready_line: str = ""
    started_at: float = 0.0
    restart_delay_s: float | None = None
    restarts: int = 0


class Supervisor:
    """Starts, watches, restarts and stops the children of the multi-process standalone."""

    def __init__(self, data_dir: Path | None, config: BrokerConfig, workers: int, bookie_port: int | None,
                 log_level: str = "INFO", bookie_http_port: int = 0, bookie_count: int = DEFAULT_BOOKIES):
        self.data_dir = data_dir
        self.bookie_count = bookie_count
        self.bookie_http_port = bookie_http_port
        self.log_level = log_level
        self.config = config
        self.workers = workers
        self.bookie_port = bookie_port
        self.store = None
        self.server = None
        self.bookies: list[Child] = []
        self.brokers: list[Child] = []
        self._private_socket_dir: Path | None = None  # made for a socket path too long under data_dir
        self._started = False
        self._stopping = False
        self._watchers: set[asyncio.Task] = set()

    @property
    def children(self) -> list[Child]:
        return self.bookies + self.brokers

    async def start(self) -> None:
        """Raises BrokerError (a child refused to start), MetadataError, ValueError (a bad plan).

        With a data directory (the standalone): serve its embedded store, start the bookies, then the workers.
        Without one (`broker start --workers N`): the workers only, on the configured metadata store."""
        # The children's chosen ports stay bound until their owners start: the bookies' HTTP ports until the bookies
        # start, the workers' until the bookies are up (kept from any port-0 bind of theirs).
        held, held_for_bookies = HeldPorts(self.config.host), HeldPorts(self.config.host)
        try:
            url = self.config.metadata_store_url if self.data_dir is None else await self._serve_metadata()
            bookie_ports = [] if self.data_dir is None else [self.bookie_port + i for i in range(self.bookie_count)]
            beacon = None if self.data_dir is None else str(self.data_dir / SMALL_ADD_BEACON)
            plans = plan_workers(self.config, self.workers, url, held, avoid=bookie_ports, small_add_beacon_path=beacon)
            if self.data_dir is not None:
                check_bookie_count(self.bookie_count, self.config)
                worker_ports = [p for c in plans for p in (c.port, c.http_port, c.tls_port, c.https_port, c.stream_port)]
                self.bookies = [Child(f"bookie-{c.bookie_id.rsplit('-', 1)[1]}", "bookie", c) for c in
                                standalone_bookie_configs(self.data_dir, url, self.bookie_port, self.config.host,
                                                          self.bookie_http_port, self.bookie_count,
                                                          journal_sync_data=self.config.journal_sync_data,
                                                          pick_port=held_for_bookies, avoid=worker_ports)]
            self.brokers = [Child(f"worker-{i}", "broker", c) for i, c in enumerate(plans)]
            held_for_bookies.release()
            await asyncio.gather(*(self._spawn(c) for c in self.bookies))
            await asyncio.gather(*(self._until_ready(c) for c in self.bookies))
            held.release()
            # Worker 0 first: the first broker of a cluster writes the cluster's URLs, which must be the
            # advertised ones; the others join it.
            await self._spawn(self.brokers[0])
            await self._until_ready(self.brokers[0])
            await asyncio.gather(*(self._spawn(c) for c in self.brokers[1:]))
            await asyncio.gather(*(self._until_ready(c) for c in self.brokers[1:]))
            self._started = True
        except BaseException:
            held.release()
            held_for_bookies.release()
            await self.stop()
            raise

    async def _serve_metadata(self) -> str:
        from storage.metadata import open_store
        from storage.metadata.served import MetadataServer

        self.data_dir.mkdir(parents=True, exist_ok=True)
        file_url = metadata_url(self.data_dir)
        self.store = await open_store(file_url)  # takes the directory's flock, and keeps the tree open
        path = socket_path(self.data_dir)
        if path.parent != self.data_dir:
            self._private_socket_dir = path.parent
        self.server = await MetadataServer.start(file_url, path)
        return self.server.url

    async def _spawn(self, child: Child) -> None:
        child.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "broker.worker_child", child.name, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, start_new_session=True)
        child.proc.stdin.write(pickle.dumps((child.kind, child.config, os.getpid(), self.log_level)))
        child.proc.stdin.close()
        child.started_at = time.monotonic()
        child.ready = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._watch(child, child.proc, child.ready))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _until_ready(self, child: Child) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(child.ready), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise BrokerError(f"standalone: {child.name} did not become ready in {START_TIMEOUT_S:.0f}s") from None

    async def _watch(self, child: Child, proc: asyncio.subprocess.Process, ready: asyncio.Future) -> None:
        """Relay the child's stdout with its name, notice its ready line, and handle its exit."""
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace").rstrip("\n")
            # Scripts wait for " ready (" in the standalone's output: only the supervisor's own line, printed once
            # every child is up, may carry it, so a child's ready line is relayed as "serving (".
            print(f"[{child.name}] {text.replace(' ready (', ' serving (')}", flush=True)
            if " ready (" in text and not ready.done():
                child.ready_line = text
                ready.set_result(text)
        code = await proc.wait()
        if not ready.done():
            ready.set_exception(BrokerError(f"standalone: {child.name} exited with status {code} before it was ready"))
            if not self._started:
                return  # start() reports it and stops everything
            ready.exception()  # a restart that died young: handled below, like any other death
        if self._stopping:
            return
        ran_for = time.monotonic() - child.started_at
        child.restart_delay_s = restart_delay_s(child.restart_delay_s, ran_for)
        print(f"standalone: {child.name} (pid {proc.pid}) exited with status {code} after {ran_for:.0f}s; "
              f"restarting it in {child.restart_delay_s:.0f}s", flush=True)
        await asyncio.sleep(child.restart_delay_s)
        if self._stopping:
            return
        child.restarts += 1
        await self._spawn(child)

    async def stop(self) -> None:
        """Stop the workers, then the bookies (a broker closes its ledgers on them), then the metadata server."""
        self._stopping = True
        await asyncio.gather(*(self._stop_child(c) for c in self.brokers))
        await asyncio.gather(*(self._stop_child(c) for c in self.bookies))
        for task in list(self._watchers):
            task.cancel()
        if self.server is not None:
            await self.server.close()
        if self._private_socket_dir is not None:
            self._private_socket_dir.rmdir()
        if self.store is not None:
            await self.store.close()

    async def _stop_child(self, child: Child) -> None:
        proc = child.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("standalone: %s did not stop in %.0fs; killing it", child.name, STOP_TIMEOUT_S)
            proc.kill()
            await proc.wait()
        except ProcessLookupError:
            pass
