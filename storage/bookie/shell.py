"""`bookie shell`: operator commands against a ledger store, BookKeeper's shell in our words.

    listbookies                         id, address, zone/upgrade domain, writable or read-only
    simpletest -e E -w Qw -a Qa -n N    write N entries, read them back, verify; entries/s and latency
    ledger ID                           metadata: state, ensembles by fragment, last entry
    readledger ID [--first F --last L]  print entries
    deleteledger ID                     delete a ledger (bookies garbage-collect its entries)

Every command takes ``--metadata-store URL``. Exit codes: 0 success, 1 a
verification failure or operation error, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.errors import StorageError
from storage.latency import percentile, summary_ms

EXIT_FAILED = 1


def add_parser(subparsers) -> None:
    shell = subparsers.add_parser("shell", help="operator commands: listbookies, simpletest, ledger, readledger, deleteledger")
    shell.add_argument("--metadata-store", required=True, help="zk://host:port[/chroot], file://DIR or memory://name")
    cmds = shell.add_subparsers(dest="shell_command", required=True)

    cmds.add_parser("listbookies", help="list registered bookies")

    simple = cmds.add_parser("simpletest", help="write N entries to a new ledger, read back, verify")
    simple.add_argument("-e", "--ensemble", type=int, default=3)
    simple.add_argument("-w", "--write-quorum", type=int, default=2)
    simple.add_argument("-a", "--ack-quorum", type=int, default=2)
    simple.add_argument("-n", "--entries", type=int, default=1000)
    simple.add_argument("--size", type=int, default=1024, help="entry payload bytes")
    simple.add_argument("--window", type=int, default=1000, help="max adds in flight")
    simple.add_argument("--placement", choices=("soft", "strict"), default="soft")

    info = cmds.add_parser("ledger", help="show a ledger's metadata")
    info.add_argument("ledger_id", type=int)

    read = cmds.add_parser("readledger", help="print a ledger's entries")
    read.add_argument("ledger_id", type=int)
    read.add_argument("--first", type=int, default=0)
    read.add_argument("--last", type=int, default=None)
    read.add_argument("--no-recovery", action="store_true", help="read up to LAC without fencing the writer")

    delete = cmds.add_parser("deleteledger", help="delete a ledger")
    delete.add_argument("ledger_id", type=int)


def run(args: argparse.Namespace) -> int:
    command = _COMMANDS[args.shell_command]
    try:
        return asyncio.run(command(args))
    except StorageError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def write_entries(handle, payloads: list[bytes], count: int, window: int) -> tuple[list[int], list[float], float]:
    """Add ``count`` entries (cycling through ``payloads``) with at most ``window`` in flight.

    Returns (entry ids, per-add latencies in seconds, elapsed seconds). Shared
    with the benchmark suite so both measure the same loop.
    """
    slots = asyncio.Semaphore(window)
    latencies: list[float] = []

    def done(started: float, fut: asyncio.Future) -> None:
        slots.release()
        if not fut.cancelled() and fut.exception() is None:
            latencies.append(time.perf_counter() - started)

    futures = []
    began = time.perf_counter()
    for i in range(count):
        await slots.acquire()
        fut = handle.add_entry_async(payloads[i % len(payloads)])
        fut.add_done_callback(lambda f, t=time.perf_counter(): done(t, f))
        futures.append(fut)
    ids = await asyncio.gather(*futures)
    return ids, latencies, time.perf_counter() - began


async def _client(args, **config) -> LedgerClient:
    return await LedgerClient.open(args.metadata_store, ClientConfig(**config))


async def listbookies(args) -> int:
    async with await _client(args) as client:
        await client.registry.refresh()
        bookies = sorted(client.registry.bookies(), key=lambda b: b.bookie_id)
        print(f"{'bookie id':<24} {'address':<22} {'zone/upgrade domain':<28} state")
        for b in bookies:
            print(f"{b.bookie_id:<24} {b.address:<22} {b.network_location:<28} {'writable' if b.writable else 'read-only'}")
        print(f"{len(bookies)} bookies ({sum(b.writable for b in bookies)} writable)")
    return 0


async def simpletest(args) -> int:
    payloads = [os.urandom(args.size) for _ in range(min(args.entries, 64))]
    async with await _client(args, placement_mode=args.placement) as client:
        handle = await client.create_ledger(args.ensemble, args.write_quorum, args.ack_quorum)
        print(f"ledger {handle.ledger_id} on {', '.join(handle.ensemble)} (E{args.ensemble}/Qw{args.write_quorum}/Qa{args.ack_quorum})")
        ids, latencies, elapsed = await write_entries(handle, payloads, args.entries, args.window)
        await handle.close()

        mismatches = [i for i, entry_id in enumerate(ids) if entry_id != i]
        reader = await client.open_ledger(handle.ledger_id, recovery=False)
        entries = await reader.read_entries(0, args.entries - 1) if args.entries else []
        await reader.close()
        mismatches += [
            e.entry_id for i, e in enumerate(entries) if e.entry_id != i or e.payload != payloads[i % len(payloads)]
        ]
        if len(entries) != args.entries:
            mismatches.append(-1)
        lat = summary_ms(latencies)
        rate = args.entries / elapsed if elapsed else float("inf")
        print(
            f"wrote {args.entries} entries of {args.size} B in {elapsed:.2f}s: {rate:,.0f} entries/s, "
            f"{rate * args.size / 1e6:,.1f} MB/s; add latency p50 {lat['p50_ms']:.2f} ms, "
            f"p95 {percentile(latencies, 95) * 1000:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms"
        )
        if mismatches:
            print(f"FAILED: {len(mismatches)} entries missing or different on read-back (first: {mismatches[:5]})")
            return EXIT_FAILED
        print(f"read back and verified {len(entries)} entries: OK")
    return 0


async def ledger(args) -> int:
    async with await _client(args) as client:
        md, version = await client.get_metadata(args.ledger_id)
        print(f"ledger {md.ledger_id}: state {md.state.value}, metadata version {version}")
        print(f"  quorum E{md.ensemble_size}/Qw{md.write_quorum_size}/Qa{md.ack_quorum_size}, digest {md.digest_type}")
        print(f"  last entry {md.last_entry_id}, length {md.length} B, created {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(md.ctime_ms / 1000))}")
        for first, bookies in md.ensembles:
            print(f"  fragment from entry {first}: {', '.join(bookies)}")
        if md.custom:
            print(f"  custom: {md.custom}")
    return 0


async def readledger(args) -> int:
    async with await _client(args) as client:
        reader = await client.open_ledger(args.ledger_id, recovery=not args.no_recovery)
        last = reader.last_add_confirmed if args.last is None else min(args.last, reader.last_add_confirmed)
        if last >= args.first:
            for entry in await reader.read_entries(args.first, last):
                shown = entry.payload[:64]
                print(f"entry {entry.entry_id}: {len(entry.payload)} B {shown!r}{'...' if len(entry.payload) > 64 else ''}")
        print(f"{max(0, last - args.first + 1)} entries (LAC {reader.last_add_confirmed})")
        await reader.close()
    return 0


async def deleteledger(args) -> int:
    async with await _client(args) as client:
        await client.delete_ledger(args.ledger_id)
        print(f"deleted ledger {args.ledger_id}")
    return 0


_COMMANDS = {
    "listbookies": listbookies,
    "simpletest": simpletest,
    "ledger": ledger,
    "readledger": readledger,
    "deleteledger": deleteledger,
}
