"""`ledger` suite: the ledger store on 3 bookie processes (one disk), E3/Qw2/Qa2, fsync on.

Measured in one run, beside the disk's own fdatasync'd bandwidth:
  * 1 KiB entries at several windows of in-flight adds (1, 16, 128, 1,024): entries/s and the
    latency of each add, which is what a ledger user gets at that window. In a closed loop the
    median latency is about window / rate (Little's law), so one large-window figure alone
    reads as "adds take 180 ms" when they wait in the writer's own queue;
  * `bookie shell simpletest`'s loop at its defaults (1,000 entries, window 1,000) in the same
    run: a burst that ends before the bookies reach a steady state, so its rate is not the
    sustained one;
  * 64 KiB entries: MB/s against the physical limit = disk bandwidth / (Qw x 2),
    because every copy is written twice (journal, then entry log);
  * a steady 1,000 entries/s open-loop schedule: add latency measured from each
    add's *scheduled* time, so a stall is charged to every add it delays
    (no coordinated omission). It runs against the bookies' defaults and, in
    alternating rounds of the same run, against bookies that sync as soon as their
    journal queue is empty (``journal_flush_when_queue_empty``, as `broker standalone`'s do).
"""

from __future__ import annotations

import asyncio
import os
import statistics
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
WINDOWS = (1, 16, 128, 1024)
SIMPLETEST_ENTRIES, SIMPLETEST_WINDOW = 1000, 1000  # `bookie shell simpletest` defaults
FLUSH_WHEN_EMPTY_ENV = {"MAGNETAR_BOOKIE_JOURNAL_FLUSH_WHEN_QUEUE_EMPTY": "true"}


async def closed_loop(client: LedgerClient, entries: int, size: int, window: int) -> dict:
    handle = await client.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM)
    _, latencies, elapsed = await write_entries(handle, [os.urandom(size)], entries, window)
    await handle.close()
    rate = entries / elapsed
    return {
        "entry_bytes": size,
        "entries": entries,
        "window": window,
        "entries_per_s": rate,
        "mb_per_s": entries * size / elapsed / 1e6,
        # Little's law: in a closed loop the mean time in the system is window / throughput
        "littles_law_ms": window / rate * 1000,
        **{f"add_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"},
    }


async def open_loop(client: LedgerClient, rate_per_s: float, duration_s: float, size: int) -> dict:
    handle = await client.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM)
    body = os.urandom(size)
    latencies: list[float] = []
    lateness: list[float] = []  # how late the generator itself sent each add: part of every latency
    futures = []
    count = int(rate_per_s * duration_s)
    # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds and is cached per loop
    # iteration, which would round every latency to the millisecond.
    start = time.perf_counter() + 0.05
    for i in range(count):
        scheduled = start + i / rate_per_s
        # pacing the schedule, not synchronisation; again while early: the loop's timer may fire a little
        # before the time asked (uvloop's clock ticks in milliseconds), and an add sent early would be
        # credited with the time it was early
        while (delay := scheduled - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        lateness.append(time.perf_counter() - scheduled)
        fut = handle.add_entry_async(body)
        fut.add_done_callback(lambda f, s=scheduled: latencies.append(time.perf_counter() - s))
        futures.append(fut)
    await asyncio.gather(*futures)
    await handle.close()
    return {
        "rate_per_s": rate_per_s,
        "entries": count,
        "entry_bytes": size,
        "latencies_s": latencies,
        "lateness_s": lateness,
        **{f"add_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"},
    }


def run(quick: bool = False, rounds: int | None = None) -> dict:
    from storage.testing.processes import BookieCluster
    from storage.testing.zookeeper import ZooKeeperServer

    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-ledger-"))
    disk_1k = fsync_bandwidth(root, 1024, 1.0 if quick else 3.0)
    disk_64k = fsync_bandwidth(root, 64 * 1024, 1.0 if quick else 3.0)
    # Group commit turns many 64 KiB adds into large fsync'd writes, so the disk's large-block
    # bandwidth is the stricter ceiling; both are reported.
    disk_1m = fsync_bandwidth(root, 1024 * 1024, 1.0 if quick else 3.0)
    with ZooKeeperServer(root / "zk") as zk, \
            BookieCluster(zk.url("/bench"), root / "bookies") as cluster, \
            BookieCluster(zk.url("/bench-flush-when-empty"), root / "bookies-flush-when-empty",
                          env=FLUSH_WHEN_EMPTY_ENV) as eager:
        results = uvloop.run(_measure(cluster.metadata_url, eager.metadata_url, quick, rounds))  # as production clients run
    physical_64k = disk_64k["mb_per_s"] / (WRITE_QUORUM * 2)
    results["disk_1k"] = disk_1k
    results["disk_64k"] = disk_64k
    results["physical_limit_64k_mb_per_s"] = physical_64k
    results["ratio_64k_to_physical"] = results["throughput_64k"]["mb_per_s"] / physical_64k
    results["disk_1m"] = disk_1m
    results["sequential_limit_mb_per_s"] = disk_1m["mb_per_s"] / (WRITE_QUORUM * 2)
    results["ratio_64k_to_sequential_limit"] = results["throughput_64k"]["mb_per_s"] / results["sequential_limit_mb_per_s"]
    results["simpletest_to_sustained"] = results["simpletest_1k"]["entries_per_s"] / results["throughput_1k"]["entries_per_s"]
    results["config"] = {"ensemble": ENSEMBLE, "write_quorum": WRITE_QUORUM, "ack_quorum": ACK_QUORUM,
                         "bookies": 3, "fsync": True, "quick": quick, "windows": list(WINDOWS)}
    _print(results)
    return results


async def _open(metadata_url: str) -> LedgerClient:
    client = await LedgerClient.open(metadata_url, ClientConfig())
    await client.registry.wait_for(lambda r: len(r.writable()) >= 3, 30)
    await closed_loop(client, 500, 1024, 200)  # warm-up: connections, caches
    return client


async def _steady(client: LedgerClient, eager: LedgerClient, quick: bool, rounds: int | None = None) -> dict:
    """1,000/s against both bookie configurations in alternating rounds: each figure over all its rounds."""
    default_rounds, seconds = (2, 1.5) if quick else (4, 5.0)
    rounds = rounds or default_rounds
    runs: dict[str, list[dict]] = {"defaults": [], "flush_when_empty": []}
    for _ in range(rounds):
        runs["defaults"].append(await open_loop(client, 1000, seconds, 1024))
        runs["flush_when_empty"].append(await open_loop(eager, 1000, seconds, 1024))
    out = {}
    for name, parts in runs.items():
        latencies = [x for part in parts for x in part.pop("latencies_s")]
        lateness = latency_summary_ms([x for part in parts for x in part.pop("lateness_s")])
        out[name] = {"send_lateness_p50_ms": lateness["p50_ms"], "send_lateness_p99_ms": lateness["p99_ms"],"rate_per_s": 1000, "entries": len(latencies), "entry_bytes": 1024, "rounds": rounds,
                     "round_p99_ms": [p["add_p99_ms"] for p in parts],
                     "median_round_p99_ms": statistics.median(p["add_p99_ms"] for p in parts),
                     **{f"add_{k}": v for k, v in latency_summary_ms(latencies).items() if k != "count"}}
    return out


async def _measure(metadata_url: str, eager_url: str, quick: bool, rounds: int | None = None) -> dict:
    client = await _open(metadata_url)
    eager = await _open(eager_url)
    try:
        # The latency runs go first, on a quiet cluster: after the throughput runs the bookies
        # are still flushing tens of MB of write cache to the same disk, which the journal's
        # fsyncs then queue behind (one disk holds both, unlike a production bookie).
        steady = await _steady(client, eager, quick, rounds)
        await eager.close()
        simpletest = await closed_loop(client, SIMPLETEST_ENTRIES, 1024, SIMPLETEST_WINDOW)
        by_window = {str(w): await closed_loop(client, _window_entries(w, quick), 1024, w) for w in WINDOWS}
        return {
            "steady_1000_per_s": steady["defaults"],
            "steady_1000_per_s_flush_when_empty": steady["flush_when_empty"],
            "simpletest_1k": simpletest,
            "window_1k": by_window,
            "throughput_1k": by_window[str(WINDOWS[-1])],
            "throughput_64k": await closed_loop(client, 300 if quick else 4_000, 64 * 1024, 64),
        }
    finally:
        await client.close()
        await eager.close()


def _window_entries(window: int, quick: bool) -> int:
    """Enough adds for a steady state at each window: a few seconds' worth at the rates seen on one disk."""
    per_window = {1: 1_000, 16: 5_000, 128: 20_000} if quick else {1: 3_000, 16: 20_000, 128: 60_000}
    return per_window.get(window, 5_000 if quick else 100_000)


def _print(r: dict) -> None:
    rows = [{"measure": f"1 KiB adds, window {w}", "value": x["entries_per_s"], "unit": "entries/s",
             "p50_ms": x["add_p50_ms"], "p99_ms": x["add_p99_ms"],
             "reference": f"window / rate = {x['littles_law_ms']:.1f} ms"} for w, x in r["window_1k"].items()]
    s, steady, eager = r["simpletest_1k"], r["steady_1000_per_s"], r["steady_1000_per_s_flush_when_empty"]
    rows += [
        {"measure": "simpletest loop (1,000 adds, window 1,000)", "value": s["entries_per_s"], "unit": "entries/s",
         "p50_ms": s["add_p50_ms"], "p99_ms": s["add_p99_ms"],
         "reference": f"{r['simpletest_to_sustained']:.2f}x the window-{WINDOWS[-1]} rate"},
        {"measure": "64 KiB adds", "value": r["throughput_64k"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["throughput_64k"]["add_p50_ms"], "p99_ms": r["throughput_64k"]["add_p99_ms"],
         "reference": f"physical {r['physical_limit_64k_mb_per_s']:.1f} MB/s -> ratio {r['ratio_64k_to_physical']:.2f}; "
                      f"1 MiB-block limit {r['sequential_limit_mb_per_s']:.1f} MB/s -> {r['ratio_64k_to_sequential_limit']:.2f}"},
        {"measure": "steady 1,000/s (1 KiB), bookie defaults", "value": steady["entries"], "unit": "entries",
         "p50_ms": steady["add_p50_ms"], "p99_ms": steady["add_p99_ms"],
         "reference": f"target p99 <= 10 ms; the generator's own lateness p50 {steady['send_lateness_p50_ms']:.2f} / "
                      f"p99 {steady['send_lateness_p99_ms']:.2f} ms"},
        {"measure": "steady 1,000/s, journal_flush_when_queue_empty", "value": eager["entries"], "unit": "entries",
         "p50_ms": eager["add_p50_ms"], "p99_ms": eager["add_p99_ms"], "reference": "alternating rounds, same run"},
        {"measure": "disk fdatasync 1 KiB", "value": r["disk_1k"]["fsyncs_per_s"], "unit": "fsyncs/s",
         "p50_ms": r["disk_1k"]["fsync_p50_ms"], "p99_ms": r["disk_1k"]["fsync_p99_ms"], "reference": "same disk, same run"},
        {"measure": "disk fdatasync 64 KiB", "value": r["disk_64k"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["disk_64k"]["fsync_p50_ms"], "p99_ms": r["disk_64k"]["fsync_p99_ms"], "reference": "same disk, same run"},
        {"measure": "disk fdatasync 1 MiB", "value": r["disk_1m"]["mb_per_s"], "unit": "MB/s",
         "p50_ms": r["disk_1m"]["fsync_p50_ms"], "p99_ms": r["disk_1m"]["fsync_p99_ms"], "reference": "same disk, same run"},
    ]
    print_table("ledger: 3 bookie processes, E3/Qw2/Qa2, fsync on", rows, ["measure", "value", "unit", "p50_ms", "p99_ms", "reference"])
