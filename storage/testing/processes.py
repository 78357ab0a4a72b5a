"""Start, kill and restart real bookie and broker processes through their real CLIs.

Readiness is a condition with a deadline (the process's /health answers 200),
never a sleep. Faults are real: ``kill9()`` sends SIGKILL, ``pause()`` SIGSTOP.
Used by the real-process test tier, the benchmarks and the cluster launcher.

Options for network and disk faults (all off by default): ``proxy=`` puts a
link of a ``NetProxyProcess`` (storage/testing/netproxy.py) in front of a
bookie or broker, which then advertises the link's port, so every peer goes
through it and ``NetProxyProcess.isolate`` can cut the process off;
``disk_limit_bytes=`` gives a bookie its own size-limited filesystem (a tmpfs,
storage/testing/disk.py); ``fault_injection=True`` starts a bookie whose
journal fsync can be slowed or failed over HTTP (``set_journal_faults``).
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from storage.testing import disk
from storage.testing.waiting import wait_until

VENV_BIN = Path(sys.executable).parent


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never the same one twice in this process.

    The kernel may hand the same ephemeral port to two consecutive probes (the
    first probe's socket is closed by then), which would make a bookie's data
    and HTTP ports collide; remembering what was handed out prevents that.
    """
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (for commands that take a base port)."""
    while True:
        base = free_port()
        wanted = range(base + 1, base + count)
        if any(port in _handed_out for port in wanted):
            continue
        with contextlib.ExitStack() as stack:
            try:
                for port in wanted:
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.update(wanted)
        return base


def http_json(method: str, url: str, body: dict | None = None, timeout_s: float = 5.0) -> dict:
    """A JSON request to one of our processes' HTTP endpoints. Raises RuntimeError with the answer on non-2xx."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{method} {url}: {exc.code} {exc.read().decode(errors='replace')}") from None


FAULT_INJECTION_ENV = "MAGNETAR_FAULT_INJECTION"  # storage/bookie/faults.py reads it


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class ServiceProcess(abc.ABC):
    """What every server process under test shares: spawn, readiness by /health, logs, signals."""

    proc: subprocess.Popen | None
    env: dict[str, str]

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Names the process in errors."""

    @property
    @abc.abstractmethod
    def log_path(self) -> Path:
        """Where stdout and stderr go."""

    @property
    @abc.abstractmethod
    def health_url(self) -> str:
        """Answers 200 once the process serves."""

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The argv that starts it."""

    def spawn(self) -> subprocess.Popen:
        """Start the process without waiting for readiness."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            start_new_session=True,
        )
        log.close()
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.restarted(self)  # an isolated process stays isolated in its new incarnation
        return self.proc

    def start(self, timeout_s: float = 30.0):
        self.spawn()
        self.wait_healthy(timeout_s)
        return self

    def is_healthy(self) -> bool:
        """True once /health answers 200; raises if the process has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
        return http_status(self.health_url) == 200

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        wait_until(self.is_healthy, timeout_s, f"{self.name} to report healthy")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time."""
        self.terminate()
        return self.wait_stopped(timeout_s)

    def terminate(self) -> None:
        """SIGTERM, without waiting (``stop_all`` signals every process before it waits for any)."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout_s: float = 15.0) -> int | None:
        """Wait for the exit after ``terminate``; SIGKILL if it does not come in time."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def restart(self, timeout_s: float = 30.0):
        self.stop()
        return self.start(timeout_s)


def stop_all(processes, timeout_s: float = 15.0) -> None:
    """Stop several processes together: SIGTERM to each, then wait for each (SIGKILL at ``timeout_s``).

    One after another, each stop waits out every earlier one's shutdown, and the processes still running
    react to each departure (a broker takes over bundles, an auditor looks for lost bookies)."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait_stopped(timeout_s)


@dataclass
class BookieProcess(ServiceProcess):
    metadata_url: str
    data_dir: Path
    zone: str
    upgrade_domain: str = "ud1"
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    proxy: "NetProxyProcess | None" = None  # when set, the bookie advertises its link's port
    disk_limit_bytes: int | None = None  # when set, data_dir is a tmpfs of this size (root only)
    fault_injection: bool = False  # the journal's fsync can be slowed or failed (set_journal_faults)
    advertised_port: int | None = None
    disk_mounted: bool = False
    disk_refused: str | None = None  # why no size-limited filesystem could be mounted, if it could not

    def __post_init__(self) -> None:
        if self.proxy is not None and self.advertised_port is None:
            self.advertised_port = self.proxy.front(self.link_name, self.port)
        if self.fault_injection:
            self.env = {**self.env, FAULT_INJECTION_ENV: "1"}

    @property
    def link_name(self) -> str:
        return f"bookie-{self.port}"

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    def spawn(self) -> subprocess.Popen:
        if self.disk_limit_bytes is not None and not self.disk_mounted and self.disk_refused is None:
            try:
                disk.mount_tmpfs(Path(self.data_dir), self.disk_limit_bytes)
                self.disk_mounted = True
            except disk.MountRefused as exc:  # not root: an ordinary directory; the full-disk fault falls back
                self.disk_refused = str(exc)
        return super().spawn()

    def unmount_disk(self) -> None:
        """Unmount the size-limited filesystem (after stop); its contents go with it."""
        if self.disk_mounted:
            disk.unmount(Path(self.data_dir))
            self.disk_mounted = False

    def set_journal_faults(self, fsync_delay_ms: float = 0.0, fsync_error: str | None = None) -> dict:
        """Slow every journal fsync by ``fsync_delay_ms``, or fail each with errno ``fsync_error`` (e.g. "ENOSPC").
        Needs ``fault_injection=True``. Both zero/None heal."""
        return http_json("PUT", f"http://127.0.0.1:{self.http_port}/api/v1/bookie/faults",
                         {"fsyncDelayMs": fsync_delay_ms, "fsyncError": fsync_error})

    def info(self) -> dict:
        return http_json("GET", f"http://127.0.0.1:{self.http_port}/api/v1/bookie/info")

    @property
    def name(self) -> str:
        return f"bookie {self.bookie_id}"

    @property
    def network_location(self) -> str:
        return f"/{self.zone}/{self.upgrade_domain}"

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir).parent / f"bookie-{self.port}.log"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/health"

    def command(self) -> list[str]:
        return [
            str(VENV_BIN / "bookie"), "start",
            "--metadata-store", self.metadata_url,
            "--data-dir", str(self.data_dir),
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--network-location", self.network_location,
            *(["--advertised-port", str(self.advertised_port)] if self.advertised_port else []),
            *self.extra_args,
        ]


@dataclass
class BrokerProcess(ServiceProcess):
    """``broker standalone --data-dir DIR`` (or ``broker start`` when ``metadata_url`` is set) on free ports.

    The standalone runs ``--single-process`` unless ``workers`` is set: then a supervisor with bookie and
    ``workers`` broker-worker processes (broker/workers.py), worker 0 on ``port``/``http_port``; with
    ``metadata_url``, ``workers`` makes it ``broker start --workers N``. ``workers="default"`` passes neither
    flag: the deployment an operator gets from a bare ``broker standalone`` (one worker per core)."""

    data_dir: Path
    metadata_url: str | None = None
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    bookie_port: int = field(default_factory=lambda: free_port_block(3))
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    # Never the default 8000; 0 lets each bookie bind a free port (printed at start), which no other process can
    # take between choosing and binding. A test of the N, N+1, N+2 layout passes free_port_block(3).
    bookie_http_port: int = 0
    stream_port: int = field(default_factory=free_port)  # never the default 4181: brokers run side by side
    # When set, clients and peers reach the broker through two proxy links (Pulsar and HTTP), which it
    # advertises as its internal listener; service_url and web_url then name the links.
    proxy: "NetProxyProcess | None" = None
    advertised_port: int | None = None
    advertised_http_port: int | None = None
    workers: int | Literal["default"] | None = None

    def __post_init__(self) -> None:
        if self.proxy is not None and self.advertised_port is None:
            self.advertised_port = self.proxy.front(self.link_name, self.port)
            self.advertised_http_port = self.proxy.front(f"{self.link_name}-http", self.http_port)
            self.env = {**self.env, "MAGNETAR_BROKER_ADVERTISED_LISTENERS":
                        f"internal:pulsar://127.0.0.1:{self.advertised_port},"
                        f"internal:http://127.0.0.1:{self.advertised_http_port}"}

    @property
    def link_name(self) -> str:
        return f"broker-{self.port}"

    @property
    def link_names(self) -> list[str]:
        return [self.link_name, f"{self.link_name}-http"] if self.proxy is not None else []

    @property
    def name(self) -> str:
        return f"broker 127.0.0.1:{self.port}"

    @property
    def stream_address(self) -> str:
        """host:port of its Stream API (gRPC)."""
        return f"127.0.0.1:{self.stream_port}"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.advertised_port or self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.advertised_http_port or self.http_port}"

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir).parent / f"broker-{self.port}.log"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/health"  # the process itself, not through its proxy link

    def spawn(self) -> subprocess.Popen:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        return super().spawn()

    def is_healthy(self) -> bool:
        """Worker 0's /health, and with workers the supervisor's ready line (every worker is up) in this run's log."""
        if not super().is_healthy():
            return False
        return self.workers is None or any(line in self.log_since_start() for line in self.SUPERVISOR_READY)

    SUPERVISOR_READY = ("broker standalone ready (", "broker workers ready (")

    def log_since_start(self) -> str:
        """What this incarnation wrote to the (appended) log."""
        with open(self.log_path, "rb") as f:
            f.seek(getattr(self, "_log_start", 0))
            return f.read().decode(errors="replace")

    def command(self) -> list[str]:
        common = ["--port", str(self.port), "--http-port", str(self.http_port), "--stream-port", str(self.stream_port),
                  *self.extra_args]
        if self.metadata_url is not None:
            workers = ["--workers", str(self.workers)] if self.workers not in (None, "default") else []
            return [str(VENV_BIN / "broker"), "start", "--metadata-store", self.metadata_url, *workers, *common]
        mode = (["--single-process"] if self.workers is None else [] if self.workers == "default"
                else ["--workers", str(self.workers)])
        return [str(VENV_BIN / "broker"), "standalone", "--data-dir", str(self.data_dir),
                "--bookie-port", str(self.bookie_port), "--bookie-http-port", str(self.bookie_http_port),
                *mode, *common]


def standalone_children(pid: int) -> dict[str, int]:
    """The children of a multi-process standalone's supervisor by name (``worker-0``, ``bookie-a``, ...), from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # exited meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"broker.worker_child" in argv:
            found[argv[argv.index(b"broker.worker_child") + 1].decode()] = int(entry.name)
    return found


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (the multi-process standalone: supervisor, bookies, workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every descendant, found before any is killed: a child that started a session of its
    own (BrokerProcess does) is outside ``root``'s process group and would otherwise outlive it, re-parented."""
    for pid in process_tree(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def process_alive(pid: int) -> bool:
    """False once the process is gone or a zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class BookieCluster:
    """N bookie processes spread round-robin over zones, sharing one metadata store."""

    metadata_url: str
    root: Path
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c")
    count: int = 3
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    bookies: list[BookieProcess] = field(default_factory=list)
    # Network and disk fault options, passed to every bookie (see BookieProcess).
    proxy: "NetProxyProcess | None" = None
    disk_limit_bytes: int | None = None
    fault_injection: bool = False

    def start(self, timeout_s: float = 60.0) -> "BookieCluster":
        for i in range(self.count):
            bookie = BookieProcess(
                self.metadata_url, Path(self.root) / f"bookie-{i}" / "data", zone=self.zones[i % len(self.zones)],
                upgrade_domain=f"ud{i}", extra_args=list(self.extra_args), env=dict(self.env),
                proxy=self.proxy, disk_limit_bytes=self.disk_limit_bytes, fault_injection=self.fault_injection,
            )
            bookie.spawn()
            self.bookies.append(bookie)
        for bookie in self.bookies:
            bookie.wait_healthy(timeout_s)
        return self

    def stop(self) -> None:
        stop_all(self.bookies)
        for bookie in self.bookies:
            bookie.unmount_disk()
        if self.disk_limit_bytes is not None:
            disk.unmount_all_under(Path(self.root))  # a bookie replaced meanwhile left its tmpfs behind

    def by_id(self, bookie_id: str) -> BookieProcess:
        for bookie in self.bookies:
            if bookie.bookie_id == bookie_id:
                return bookie
        raise KeyError(bookie_id)

    def __enter__(self) -> "BookieCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class NetProxyProcess(ServiceProcess):
    """The fault-injecting loopback proxy (storage/testing/netproxy.py) as a process: links in front of servers,
    and partitions that blackhole a process's traffic both ways."""

    root: Path
    control_port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    # process name -> (its links, the process): the pid is read at each apply, so isolation follows a restart.
    _isolated: dict[str, tuple[list[str], "BookieProcess | BrokerProcess"]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"netproxy 127.0.0.1:{self.control_port}"

    @property
    def log_path(self) -> Path:
        return Path(self.root) / f"netproxy-{self.control_port}.log"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}/health"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "storage.testing.netproxy", "--control-port", str(self.control_port)]

    def front(self, name: str, target_port: int) -> int:
        """A new link forwarding to ``target_port``; returns the port peers should dial instead."""
        for _ in range(3):
            listen_port = free_port()
            try:
                http_json("POST", f"http://127.0.0.1:{self.control_port}/links",
                          {"name": name, "listen_port": listen_port, "target_port": target_port})
                return listen_port
            except RuntimeError as exc:
                if " 409 " not in str(exc):  # only a port taken meanwhile is worth another try
                    raise
        raise RuntimeError(f"could not find a free port for link {name}")

    def zookeeper_url(self, zookeeper, chroot: str = "") -> str:
        """A zk:// URL through a link in front of ``zookeeper`` (a ZooKeeperServer), made once per proxy."""
        links = self.describe()["links"]
        port = links["zookeeper"]["listen_port"] if "zookeeper" in links else self.front("zookeeper", zookeeper.port)
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return f"zk://127.0.0.1:{port}{chroot}"

    def partition(self, links: list[str] = (), pids: list[int] = ()) -> dict:
        """Blackhole every connection to ``links`` and every connection opened by ``pids`` (replaces any
        earlier partition)."""
        return http_json("PUT", f"http://127.0.0.1:{self.control_port}/rules", {"links": list(links), "pids": list(pids)},
                         timeout_s=60)

    def isolate(self, process: "BookieProcess | BrokerProcess") -> dict:
        """Cut ``process`` off from everyone, both ways: its own links and every connection it opens. Adds to the
        processes already isolated (each is cut off from all others, so two isolated processes are not
        connected either)."""
        links = process.link_names if isinstance(process, BrokerProcess) else [process.link_name]
        self._isolated[process.name] = (list(links), process)
        return self._apply()

    def rejoin(self, process: "BookieProcess | BrokerProcess") -> dict:
        """Lift ``process``'s isolation (whatever its pid now, should it have restarted since)."""
        self._isolated.pop(process.name, None)
        return self._apply()

    def restarted(self, process) -> None:
        """``process`` was started again under a new pid (spawn calls this): while it is isolated, the connections
        its new incarnation opens are held too. Called right after the fork, before the new process can have
        dialled anyone (a Python process takes far longer to start)."""
        if process.name in self._isolated:
            self._apply()

    def _apply(self) -> dict:
        links = [name for names, _ in self._isolated.values() for name in names]
        return self.partition(links, [p.proc.pid for _, p in self._isolated.values() if p.proc is not None])

    def heal(self) -> dict:
        self._isolated.clear()
        return self.partition()

    def describe(self) -> dict:
        return http_json("GET", f"http://127.0.0.1:{self.control_port}/links")
