"""Shared pieces of the bookie-server tests: configs on free ports, ledger metadata, a raw protocol connection.

The raw connection speaks storage/protocol.py directly (no ledger client), so
the tests see exactly the frames and status codes the bookie sends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage import digest, protocol as p
from storage.bookie.config import BookieConfig, load_config
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key
from storage.metadata import MetadataStore, paths
from storage.testing.processes import free_port

KEY = master_key(b"")


def config_for(root: Path, name: str = "bookie", **changes) -> BookieConfig:
    """A bookie config under ``root/name`` on free ports. The store is passed to the service, so the URL is unused."""
    return load_config(overrides={
        "metadata_store_url": "memory://unused", "data_dir": str(root / name), "port": free_port(),
        "http_port": free_port(), "network_location": "/zone-a/ud1", **changes,
    }, environ={})


async def make_ledger(store: MetadataStore, ledger_id: int, state: LedgerState = LedgerState.OPEN) -> None:
    md = LedgerMetadata(ledger_id, 3, 2, 2, b"", ((0, ("a", "b", "c")),), state=state)
    await store.create(paths.ledger_path(ledger_id), md.to_bytes(), make_parents=True)


async def close_ledger(store: MetadataStore, ledger_id: int, last_entry_id: int) -> None:
    """Close a ledger's metadata with a conditional write, as the ledger client does."""
    data, stat = await store.get(paths.ledger_path(ledger_id))
    closed = LedgerMetadata.from_bytes(data).with_state(LedgerState.CLOSED, last_entry_id=last_entry_id)
    await store.set(paths.ledger_path(ledger_id), closed.to_bytes(), stat.version)


def add(rid: int, ledger_id: int, entry_id: int, payload: bytes = b"x", key: bytes = KEY, flags: int = 0):
    body = digest.package(ledger_id, entry_id, entry_id - 1, entry_id + 1, payload)
    return p.AddRequest(rid, ledger_id, entry_id, flags, key, body)


class Conn:
    """A bare protocol connection to a bookie: frames out, decoded responses in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = p.FrameDecoder("client")
        self.ready: list = []

    @classmethod
    async def open(cls, port: int) -> "Conn":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, *messages) -> None:
        self.writer.write(b"".join(p.encode(m) for m in messages))

    async def recv(self, n: int = 1, timeout_s: float = 10.0) -> list:
        """The next ``n`` responses in arrival order."""
        while len(self.ready) < n:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout_s)
            if not data:
                raise ConnectionError("closed by the bookie")
            self.ready += self.decoder.feed(data)
        out, self.ready = self.ready[:n], self.ready[n:]
        return out

    async def request(self, message):
        self.send(message)
        (response,) = await self.recv()
        return response

    async def at_eof(self, timeout_s: float = 10.0) -> bool:
        return await asyncio.wait_for(self.reader.read(1), timeout_s) == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


def dir_bytes(path: Path) -> int:
    """Sum of the sizes of every file under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


async def kill_9_after_acks(script: str, data_dir: Path, at_least: int, timeout_s: float) -> int:
    """Runs ``script`` (a bookie writing into ``data_dir`` and printing ``acked <entry id>`` after each acknowledged
    batch) in a child process, kills it with SIGKILL once it has acked ``at_least``, and returns the last id acked."""
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", script, str(data_dir)], cwd=repo, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(repo)})
    acked = -1
    try:
        deadline = time.monotonic() + timeout_s
        while acked < at_least:
            line = await asyncio.to_thread(child.stdout.readline)
            if not line:
                raise AssertionError(f"child exited early with {child.wait()}")
            if line.startswith(b"acked"):
                acked = int(line.split()[1])
            if time.monotonic() > deadline:
                raise TimeoutError("child did not ack enough entries")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    return acked
