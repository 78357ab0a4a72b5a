"""`ledger` suite: the ledger store on 3 bookie processes (one disk), E3/Qw2/Qa2, fsync on.

Measured in one run, beside the disk's own fdatasync'd bandwidth:
  * 1 KiB entries, closed loop with a window of in-flight adds: entries/s, MB/s, add latency;
  * 64 KiB entries: MB/s against the physical limit = disk bandwidth / (Qw x 2),
    because every copy is written twice (journal, then entry log);
  * a steady 1,000 entries/s open-loop schedule: add latency measured from each
    add's *scheduled* time, so a stall is charged to every add it delays
    (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import uvloop

from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import latency_summary_ms, print_table
from storage.tools.shell import write_entries
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig

ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 3, 2, 2


async def closed_loop(client: LedgerClient, entries: int, size: int, window: int) -> dict:
    handle = await client.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM)
    _, latencies, elapsed = await write_entries(handle, [os.urandom(size)], entries, window)
    await handle.close()
    return {
        "entry_bytes": size,
        "entries": entries,
        "entries_per_s": entries / elapsed,
        "mb_per_s": entries * size / elapsed / 1e6,
        **{f"add_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"},
    }


async def open_loop(client: LedgerClient, rate_per_s: float, duration_s: float, size: int) -> dict:
    handle = await client.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM)
    body = os.urandom(size)
    latencies: list[float] = []
    futures = []
    count = int(rate_per_s * duration_s)
    # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds and is cached per loop
    # iteration, which would round every latency to the millisecond.
    start = time.perf_counter() + 0.05
    for i in range(count):
        scheduled = start + i / rate_per_s
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the schedule, not synchronisation
        fut = handle.add_entry_async(body)
        fut.add_done_callback(lambda f, s=scheduled: latencies.append(time.perf_counter() - s))
        futures.append(fut)
    await asyncio.gather(*futures)
    await handle.close()
    return {
        "rate_per_s": rate_per_s,
        "entries": count,
        "entry_bytes": size,
        **{f"add_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"},
    }


def run(quick: bool = False) -> dict:
    from storage.testing.processes import BookieCluster
    from storage.testing.zookeeper import ZooKeeperServer

    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-ledger-"))
    disk_1k = fsync_bandwidth(root, 1024, 1.0 if quick else 3.0)
    disk_64k = fsync_bandwidth(root, 64 * 1024, 1.0 if quick else 3.0)
    # Group commit turns many 64 KiB adds into large fsync'd writes, so the disk's large-block
    # bandwidth is the stricter ceiling; both are reported.
    disk_1m = fsync_bandwidth(root, 1024 * 1024, 1.0 if quick else 3.0)
    with ZooKeeperServer(root / "zk") as zk, BookieCluster(zk.url("/bench"), root / "bookies") as cluster:
        results = uvloop.run(_measure(cluster.metadata_url, quick))  # as production clients run
    physical_64k = disk_64k["mb_per_s"] / (WRITE_QUORUM * 2)
    results["disk_1k"] = disk_1k
    results["disk_64k"] = disk_64k
    results["physical_limit_64k_mb_per_s"] = physical_64k
    results["ratio_64k_to_physical"] = results["throughput_64k"]["mb_per_s"] / physical_64k
    results["disk_1m"] = disk_1m
    results["sequential_limit_mb_per_s"] = disk_1m["mb_per_s"] / (WRITE_QUORUM * 2)
    results["ratio_64k_to_sequential_limit"] = results["throughput_64k"]["mb_per_s"] / results["sequential_limit_mb_per_s"]
    results["config"] = {"ensemble": ENSEMBLE, "write_quorum": WRITE_QUORUM, "ack_quorum": ACK_QUORUM,
                         "bookies": 3, "fsync": True, "quick": quick}
    _print(results)
    return results


async def _measure(metadata_url: str, quick: bool) -> dict:
    client = await LedgerClient.open(metadata_url, ClientConfig())
    await client.registry.wait_for(lambda r: len(r.writable()) >= 3, 30)
    try:
        await closed_loop(client, 500, 1024, 200)  # warm-up: connections, caches
        # The latency run goes first, on a quiet cluster: after the throughput runs the bookies
        # are still flushing tens of MB of write cache to the same disk, which the journal's
        # fsyncs then queue behind (one disk holds both, unlike a production bookie).
        steady = await open_loop(client, 1000, 3 if quick else 20, 1024)
        return {
            "steady_1000_per_s": steady,
            "throughput_1k": await closed_loop(client, 5_000 if quick else 100_000, 1024, 2000),
            "throughput_64k": await closed_loop(client, 300 if quick else 4_000, 64 * 1024, 64),
        }
    finally:
        await client.close()


def _print(r: dict) -> None:
    rows = [
        {"measure": "1 KiB adds", "value": r["throughput_1k"]["entries_per_s"], "unit": "entries/s",
         "p50_ms": r["throughput_1k"]["add_p50_ms"], "p99_ms": r["throughput_1k"]["add_p99_ms"], "reference": "target 15,000"},
        {"measure": "64 KiB adds", "value": r["throughput_64k"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["throughput_64k"]["add_p50_ms"], "p99_ms": r["throughput_64k"]["add_p99_ms"],
         "reference": f"physical {r['physical_limit_64k_mb_per_s']:.1f} MB/s -> ratio {r['ratio_64k_to_physical']:.2f}; "
                      f"1 MiB-block limit {r['sequential_limit_mb_per_s']:.1f} MB/s -> {r['ratio_64k_to_sequential_limit']:.2f}"},
        {"measure": "steady 1,000/s (1 KiB)", "value": r["steady_1000_per_s"]["entries"], "unit": "entries",
         "p50_ms": r["steady_1000_per_s"]["add_p50_ms"], "p99_ms": r["steady_1000_per_s"]["add_p99_ms"], "reference": "target p99 <= 10 ms"},
        {"measure": "disk fdatasync 1 KiB", "value": r["disk_1k"]["fsyncs_per_s"], "unit": "fsyncs/s",
         "p50_ms": r["disk_1k"]["fsync_p50_ms"], "p99_ms": r["disk_1k"]["fsync_p99_ms"], "reference": "same disk, same run"},
        {"measure": "disk fdatasync 64 KiB", "value": r["disk_64k"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["disk_64k"]["fsync_p50_ms"], "p99_ms": r["disk_64k"]["fsync_p99_ms"], "reference": "same disk, same run"},
        {"measure": "disk fdatasync 1 MiB", "value": r["disk_1m"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["disk_1m"]["fsync_p50_ms"], "p99_ms": r["disk_1m"]["fsync_p99_ms"], "reference": "same disk, same run"},
    ]
    print_table("ledger: 3 bookie processes, E3/Qw2/Qa2, fsync on", rows, ["measure", "value", "unit", "p50_ms", "p99_ms", "reference"])
