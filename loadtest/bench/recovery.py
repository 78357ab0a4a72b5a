"""`recovery` suite: time from kill -9 of a bookie to every ledger fully replicated again, and copy bandwidth.

A real ZooKeeper and 4 bookie processes in zones a, b, c, a with autorecovery on (recovery delay 2 s,
2 s ZooKeeper session). The bench writes ``MAGNETAR_BENCH_RECOVERY_MB`` (default 1024; 64 with --quick)
of ledger data in 64 KiB entries over 32 closed E2/Qw2/Qa2 ledgers, kills the bookie holding the most of
it, and times:

* detection: kill -> first under-replication mark (session expiry + the recovery delay);
* repair: first mark -> no mark left and no ledger naming the dead bookie;
* total: kill -> fully replicated.

Re-replication bandwidth is the bytes the surviving bookies' workers copied
(``bookie_autorecovery_rereplicated_bytes_total``) over the repair time. Each copied entry is read from a
survivor, written (journal fsync) to the new bookie and read back. Reference, same run and disk: 64 KiB and
1 MiB appends with an fdatasync each (loadtest/bench/disk.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import time
import urllib.request
from pathlib import Path

from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import print_table

ENTRY_BYTES = 64 * 1024
LEDGERS = 32
ENV = {
    "MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": "2",
    "MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": "2",
    "MAGNETAR_BOOKIE_REPLICATION_POLL_INTERVAL_S": "0.2",
}


async def _write(url: str, total_bytes: int) -> dict[str, int]:
    """Fill LEDGERS closed ledgers; returns bytes held per bookie."""
    from storage.tools.shell import write_entries
    from storage.client.client import LedgerClient

    per_ledger = max(1, total_bytes // ENTRY_BYTES // LEDGERS)
    payloads = [os.urandom(ENTRY_BYTES) for _ in range(16)]
    held: dict[str, int] = {}
    async with await LedgerClient.open(url) as client:
        await client.registry.wait_for(lambda r: len(r.writable()) >= 4, 30)
        for _ in range(LEDGERS):
            handle = await client.create_ledger(2, 2, 2)
            await write_entries(handle, payloads, per_ledger, 64)
            await handle.close()
            for bookie in handle.ensemble:
                held[bookie] = held.get(bookie, 0) + per_ledger * ENTRY_BYTES
    return held


async def _watch_repair(url: str, dead: str, t_kill: float, timeout_s: float) -> tuple[float, float]:
    """(first mark seen, fully repaired), as time.monotonic() values."""
    from storage.autorecovery import checker
    from storage.autorecovery.underreplication import UnderReplication
    from storage.client.client import LedgerClient

    async with await LedgerClient.open(url) as client:
        marks = UnderReplication(client.context.store)
        first_mark = None
        while time.monotonic() - t_kill < timeout_s:
            marked = await marks.list()
            if marked and first_mark is None:
                first_mark = time.monotonic()
            if first_mark is not None and not marked:
                named = set()
                for lid in await client.list_ledgers():
                    named |= checker.bookies_of((await client.get_metadata(lid))[0])
                if dead not in named:
                    return first_mark, time.monotonic()
            await asyncio.sleep(0.05)  # polling the store with a deadline
    raise TimeoutError(f"not fully replicated {timeout_s:.0f}s after the kill")


def _metric(http_port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as resp:
        match = re.search(rf"^{name} ([0-9.e+-]+)$", resp.read().decode(), re.M)
    return float(match.group(1)) if match else 0.0


def run(quick: bool = False) -> dict:
    from storage.testing.processes import BookieCluster
    from storage.testing.zookeeper import ZooKeeperServer

    total_mb = int(os.environ.get("MAGNETAR_BENCH_RECOVERY_MB", "64" if quick else "1024"))
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-recovery-"))
    disk_64k = fsync_bandwidth(root / "probe", 64 * 1024, 1.0 if quick else 3.0)
    disk_1m = fsync_bandwidth(root / "probe", 1024 * 1024, 1.0 if quick else 3.0)
    with ZooKeeperServer(root / "zk") as zk:
        cluster = BookieCluster(zk.url("/bench"), root / "bookies", zones=("zone-a", "zone-b", "zone-c", "zone-a"),
                                count=4, env=dict(ENV)).start()
        try:
            t0 = time.monotonic()
            held = asyncio.run(_write(cluster.metadata_url, total_mb * 1024 * 1024))
            write_s = time.monotonic() - t0
            victim = max(cluster.bookies, key=lambda b: held.get(b.bookie_id, 0))
            t_kill = time.monotonic()
            victim.kill9()
            first_mark, done = asyncio.run(_watch_repair(cluster.metadata_url, victim.bookie_id, t_kill, 1800))
            copied = sum(_metric(b.http_port, "bookie_autorecovery_rereplicated_bytes_total")
                         for b in cluster.bookies if b.alive)
        finally:
            cluster.stop()
    repair_s = done - first_mark
    result = {
        "ledger_data_mb": total_mb,
        "victim_held_mb": held.get(victim.bookie_id, 0) / 2**20,
        "write_s": write_s,
        "detection_s": first_mark - t_kill,
        "repair_s": repair_s,
        "kill_to_replicated_s": done - t_kill,
        "rereplicated_mb": copied / 2**20,
        "rereplication_mb_per_s": copied / 1e6 / repair_s if repair_s > 0 else None,
        "disk_fsync_64k_mb_per_s": disk_64k["mb_per_s"],
        "disk_fsync_1m_mb_per_s": disk_1m["mb_per_s"],
    }
    print_table("recovery: kill -9 of a bookie to fully replicated", [result], list(result))
    return result
