"""A real ZooKeeper server (Debian package) as a subprocess on a free loopback port.

Usable outside pytest (the cluster launcher starts one the same way)::

    with ZooKeeperServer() as zk:
        url = zk.url("/my-cluster")     # zk://127.0.0.1:PORT/my-cluster

A short tick (200 ms; ``minSessionTimeout`` stays 1 s) lets clients ask for
session timeouts of a few seconds, so session-expiry tests run in seconds,
and the server expires a session within one tick of its timeout (it checks
once a tick: with 500 ms ticks a dead broker's bundles came free up to 0.5 s
later). Readiness is ZooKeeper answering the
``ruok`` four-letter word, polled with a deadline. ``stop()`` then
``start()`` restarts the server on the same port and data, so sessions
survive it as they survive a real server restart.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from storage.testing.processes import free_port
from storage.testing.waiting import wait_until

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
INSTALL_HINT = "ZooKeeper is not installed: run `apt-get install -y zookeeper` (or `make zookeeper`)"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def ensure_zookeeper_installed() -> None:
    """Raise RuntimeError saying how to install ZooKeeper (or java) when either is missing."""
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(f"{INSTALL_HINT} ({ZOOKEEPER_JAR} is missing)")
    if shutil.which("java") is None:
        raise RuntimeError("java is not on PATH; ZooKeeper needs a JRE (apt-get install -y default-jre-headless)")


def four_letter(port: int, word: str) -> str | None:
    """The server's answer to a four-letter command, or None when it does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None


class ZooKeeperServer:
    """One standalone ZooKeeper; ``root`` holds zoo.cfg, the data and ``zookeeper.log``."""

    def __init__(self, root: str | Path | None = None, port: int | None = None):
        ensure_zookeeper_installed()  # before making a directory nobody would clean up
        self._owns_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="magnetar-zk-"))
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.root / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return f"zk://{self.hosts}{chroot}"

    def granted_session_timeouts_ms(self) -> dict[int, int]:
        """Session id -> the timeout the server granted it (it clamps requests to its min/max), from ``cons``."""
        answer = four_letter(self.port, "cons") or ""
        return {int(sid, 16): int(to) for sid, to in re.findall(r"sid=0x([0-9a-f]+).*?,to=(\d+)", answer)}

    def start(self, timeout_s: float = 60.0) -> "ZooKeeperServer":
        """Start (or restart) the server and wait until it answers. Raises RuntimeError with the log tail."""
        ensure_zookeeper_installed()
        for attempt in range(3):
            try:
                return self._start_once(timeout_s)
            except _PortTaken:
                if self._fixed_port or attempt == 2:
                    raise RuntimeError(f"port {self.port} is taken:\n{self.log_tail()}") from None
                self.port = free_port()  # someone took it between free_port() and bind: pick again
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> "ZooKeeperServer":
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            f"dataDir={self.root / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "tickTime=200\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            "initLimit=10\nsyncLimit=5\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,mntr,stat,cons\n"
        )
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dzookeeper.log.dir={self.root}",
                 "-cp", f"{ZOOKEEPER_JAR}:/usr/share/java/*", MAIN_CLASS, str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with status {self.proc.returncode}")
            return four_letter(self.port, "ruok") == "imok"

        try:
            wait_until(ready, timeout_s, f"ZooKeeper on port {self.port}", interval_s=0.05)
        except (TimeoutError, RuntimeError) as exc:
            self.stop()
            if "Address already in use" in self.log_path.read_bytes()[log_start:].decode(errors="replace"):
                raise _PortTaken() from exc
            raise RuntimeError(f"{exc}; log {self.log_path}:\n{self.log_tail()}") from exc
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGTERM (SIGKILL after 10 s), or SIGKILL at once with ``kill=True``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def cleanup(self) -> None:
        """Stop, and remove the directory if this server made it."""
        self.stop()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


class _PortTaken(Exception):
    pass
