"""Start, kill and restart real bookie and broker processes through their real CLIs.

Readiness is a condition with a deadline (the process's /health answers 200),
never a sleep. Faults are real: ``kill9()`` sends SIGKILL, ``pause()`` SIGSTOP.
Used by the real-process test tier, the benchmarks and the cluster launcher.
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

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
        if not self.alive:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def restart(self, timeout_s: float = 30.0):
        self.stop()
        return self.start(timeout_s)


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

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

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
            *self.extra_args,
        ]


@dataclass
class BrokerProcess(ServiceProcess):
    """``broker standalone --data-dir DIR`` (or ``broker start`` when ``metadata_url`` is set) on free ports."""

    data_dir: Path
    metadata_url: str | None = None
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    bookie_port: int = field(default_factory=lambda: free_port_block(3))
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    stream_port: int = field(default_factory=free_port)  # never the default 4181: brokers run side by side

    @property
    def name(self) -> str:
        return f"broker 127.0.0.1:{self.port}"

    @property
    def stream_address(self) -> str:
        """host:port of its Stream API (gRPC)."""
        return f"127.0.0.1:{self.stream_port}"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir).parent / f"broker-{self.port}.log"

    @property
    def health_url(self) -> str:
        return f"{self.web_url}/health"

    def command(self) -> list[str]:
        common = ["--port", str(self.port), "--http-port", str(self.http_port), "--stream-port", str(self.stream_port),
                  *self.extra_args]
        if self.metadata_url is not None:
            return [str(VENV_BIN / "broker"), "start", "--metadata-store", self.metadata_url, *common]
        return [str(VENV_BIN / "broker"), "standalone", "--data-dir", str(self.data_dir),
                "--bookie-port", str(self.bookie_port), *common]


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

    def start(self, timeout_s: float = 60.0) -> "BookieCluster":
        for i in range(self.count):
            bookie = BookieProcess(
                self.metadata_url, Path(self.root) / f"bookie-{i}" / "data", zone=self.zones[i % len(self.zones)],
                upgrade_domain=f"ud{i}", extra_args=list(self.extra_args), env=dict(self.env),
            )
            bookie.spawn()
            self.bookies.append(bookie)
        for bookie in self.bookies:
            bookie.wait_healthy(timeout_s)
        return self

    def stop(self) -> None:
        for bookie in self.bookies:
            bookie.stop()

    def by_id(self, bookie_id: str) -> BookieProcess:
        for bookie in self.bookies:
            if bookie.bookie_id == bookie_id:
                return bookie
        raise KeyError(bookie_id)

    def __enter__(self) -> "BookieCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
