"""A real ZooKeeper server (Debian package) as a subprocess on a free loopback port.

``tickTime=500`` lets clients ask for session timeouts down to 1 s, so
session-expiry tests run in seconds. Readiness is ZooKeeper answering the
``ruok`` four-letter word, polled with a deadline.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.harness.processes import free_port, wait_until

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
INSTALL_HINT = "ZooKeeper is not installed: run `apt-get install -y zookeeper` (or `make test`, which installs it)"


def ensure_zookeeper_installed() -> None:
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(INSTALL_HINT)
    if shutil.which("java") is None:
        raise RuntimeError("java is not on PATH; ZooKeeper needs a JRE (apt-get install -y default-jre-headless)")


def four_letter(port: int, word: str) -> str | None:
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
    def __init__(self, root: str | Path | None = None, port: int | None = None):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="magnetar-zk-"))
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.root / "zookeeper.log"

    def start(self, timeout_s: float = 60.0) -> "ZooKeeperServer":
        ensure_zookeeper_installed()
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            f"dataDir={self.root / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=500\ninitLimit=10\nsyncLimit=5\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr\nmaxClientCnxns=0\n"
        )
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.root), "-cp",
                 f"{ZOOKEEPER_JAR}:/usr/share/java/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            return four_letter(self.port, "ruok") == "imok"

        try:
            wait_until(ready, timeout_s, f"ZooKeeper on port {self.port}", interval_s=0.1)
        except TimeoutError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{self.log_tail()}") from exc
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def url(self, chroot: str = "") -> str:
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return f"zk://127.0.0.1:{self.port}{chroot}"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
