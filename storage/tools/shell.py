"""`bookie shell`: operator commands against a ledger store, BookKeeper's shell in our words.

    listbookies                         id, address, zone/upgrade domain, writable or read-only
    simpletest -e E -w Qw -a Qa -n N    write N entries, read them back, verify; entries/s and latency
    ledger ID                           metadata: state, ensembles by fragment, last entry
    readledger ID [--first F --last L]  print entries
    deleteledger ID                     delete a ledger (bookies garbage-collect its entries)
    listledgers                         every ledger id, one per line
    listunderreplicated                 ids of ledgers marked under-replicated, one per line (nothing: healthy)
    decommissionbookie BOOKIE_ID        make a live bookie read-only, re-replicate everything it holds, wait
                                        (the bookie's HTTP admin token, if it has one: --http-admin-token-file
                                        or MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN)
    recover BOOKIE_ID                   re-replicate everything a (dead) bookie held now, without the delay; wait

Every command takes ``--metadata-store URL``, before or after the command
name, and ``--tls-trust-certs-file`` (``--tls-cert-file``, ``--tls-key-file``)
when the bookies serve TLS. Exit codes: 0 success, 1 a verification failure, operation error or
timeout, 2 bad arguments.
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
EXIT_USAGE = 2
ADMIN_TOKEN_ENV = "MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN"  # the bookie reads its http_admin_token from it too


def add_parser(subparsers) -> None:
    # Global options are accepted before and after the command name: each
    # parser knows them, and SUPPRESS keeps a subcommand's parser from
    # overwriting a value given before the command with its own default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--metadata-store", default=argparse.SUPPRESS,
                        help="zk://host:port[/chroot], file://DIR or memory://name (required)")
    common.add_argument("--tls-trust-certs-file", default=argparse.SUPPRESS,
                        help="bookies serve TLS: the CA certificates (PEM) to check them against")
    common.add_argument("--tls-cert-file", default=argparse.SUPPRESS,
                        help="client certificate (PEM) for bookies that require client authentication")
    common.add_argument("--tls-key-file", default=argparse.SUPPRESS, help="the client certificate's key (PEM)")
    shell = subparsers.add_parser("shell", parents=[common], help="operator commands: listbookies, listledgers, "
                                  "listunderreplicated, simpletest, ledger, readledger, deleteledger, "
                                  "decommissionbookie, recover")
    cmds = shell.add_subparsers(dest="shell_command", required=True)

    def command(name: str, **kw):
        return cmds.add_parser(name, parents=[common], **kw)

    command("listbookies", help="list registered bookies")
    command("listledgers", help="print every ledger id, one per line")
    command("listunderreplicated", help="print the ids of under-replicated ledgers, one per line")
    for name, what in (("decommissionbookie", "move everything off a live bookie before it leaves"),
                       ("recover", "re-replicate everything a dead bookie held, now")):
        sub = command(name, help=what)
        sub.add_argument("bookie_id")
        sub.add_argument("--timeout-s", type=float, default=3600.0, help="give up waiting after this long")
        sub.add_argument("--no-wait", action="store_true", help="mark the ledgers and return")
        if name == "decommissionbookie":
            sub.add_argument("--http-admin-token-file", help="file holding the bookie's http_admin_token "
                             "(default: $MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN)")

    simple = command("simpletest", help="write N entries to a new ledger, read back, verify")
    simple.add_argument("-e", "--ensemble", type=int, default=3)
    simple.add_argument("-w", "--write-quorum", type=int, default=2)
    simple.add_argument("-a", "--ack-quorum", type=int, default=2)
    simple.add_argument("-n", "--entries", type=int, default=1000)
    simple.add_argument("--size", type=int, default=1024, help="entry payload bytes")
    simple.add_argument("--window", type=int, default=1000, help="max adds in flight")
    simple.add_argument("--placement", choices=("soft", "strict"), default="soft")

    info = command("ledger", help="show a ledger's metadata")
    info.add_argument("ledger_id", type=int)

    read = command("readledger", help="print a ledger's entries")
    read.add_argument("ledger_id", type=int)
    read.add_argument("--first", type=int, default=0)
    read.add_argument("--last", type=int, default=None)
    read.add_argument("--no-recovery", action="store_true", help="read up to LAC without fencing the writer")

    delete = command("deleteledger", help="delete a ledger")
    delete.add_argument("ledger_id", type=int)


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "metadata_store", None):
        print("bookie shell: --metadata-store URL is required (before or after the command)", file=sys.stderr)
        return EXIT_USAGE
    command = _COMMANDS[args.shell_command]
    try:
        return asyncio.run(command(args))
    except StorageError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:  # e.g. an unreadable --http-admin-token-file or TLS file
        print(f"error: {exc}", file=sys.stderr)
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
    tls = {"tls_trust_certs_file_path": getattr(args, "tls_trust_certs_file", None),
           "tls_certificate_file_path": getattr(args, "tls_cert_file", None),
           "tls_key_file_path": getattr(args, "tls_key_file", None)}
    return await LedgerClient.open(args.metadata_store, ClientConfig(**config, **tls))


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
        password = os.urandom(16)  # exercises the bookies' master-key check like any writer
        handle = await client.create_ledger(args.ensemble, args.write_quorum, args.ack_quorum, password=password)
        print(f"ledger {handle.ledger_id} on {', '.join(handle.ensemble)} (E{args.ensemble}/Qw{args.write_quorum}/Qa{args.ack_quorum})")
        ids, latencies, elapsed = await write_entries(handle, payloads, args.entries, args.window)
        await handle.close()

        mismatches = [i for i, entry_id in enumerate(ids) if entry_id != i]
        reader = await client.open_ledger(handle.ledger_id, recovery=False, password=password)
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
        # An operator tool with metadata access: the ledger's password is in its metadata.
        md, _ = await client.get_metadata(args.ledger_id)
        reader = await client.open_ledger(args.ledger_id, recovery=not args.no_recovery, password=md.password)
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


async def listledgers(args) -> int:
    async with await _client(args) as client:
        for lid in await client.list_ledgers():
            print(lid)
    return 0


async def listunderreplicated(args) -> int:
    from storage.autorecovery.underreplication import UnderReplication

    async with await _client(args) as client:
        for lid in await UnderReplication(client.context.store).list():
            print(lid)
    return 0


async def _move_off(args, decommission: bool) -> int:
    from storage.autorecovery import admin

    async with await _client(args) as client:
        if decommission:
            await admin.set_read_only(client, args.bookie_id, _admin_token(args))
            print(f"bookie {args.bookie_id} is read-only; no new data goes to it")
        marked = await admin.mark_bookie(client, args.bookie_id)
        print(f"marked {len(marked)} ledgers with fragments on {args.bookie_id} for re-replication")
        if args.no_wait:
            return 0
        if await admin.wait_until_moved(client, args.bookie_id, args.timeout_s, print):
            print(f"no ledger has data on {args.bookie_id} any more"
                  + ("; it can be stopped" if decommission else ""))
            return 0
    return EXIT_FAILED


def _admin_token(args) -> str | None:
    path = getattr(args, "http_admin_token_file", None)
    if path:
        with open(path) as f:
            return f.read().strip() or None
    return os.environ.get(ADMIN_TOKEN_ENV) or None


async def decommissionbookie(args) -> int:
    return await _move_off(args, decommission=True)


async def recover(args) -> int:
    return await _move_off(args, decommission=False)


_COMMANDS.update({
    "listledgers": listledgers,
    "listunderreplicated": listunderreplicated,
    "decommissionbookie": decommissionbookie,
    "recover": recover,
})
