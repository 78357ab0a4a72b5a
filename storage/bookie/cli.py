"""Console script `bookie`: `start` one bookie, `standalone` three in one process, `shell` operator commands.

Exit codes: 0 clean shutdown; 1 runtime failure; 2 refused to start (bad
configuration, cookie mismatch, port in use) with a one-paragraph reason on
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from storage.bookie.config import BookieConfig, load_config
from storage.errors import BookieStartupError, MetadataError, StorageError
from storage.tools import shell
from storage.large_buffers import keep_large_buffers

EXIT_REFUSED = 2

STANDALONE_ZONES = ("zone-a", "zone-b", "zone-c")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bookie", description="Magnetar bookie: the storage node of the ledger store")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    start = commands.add_parser("start", help="run one bookie")
    start.add_argument("--config", help="TOML file (keys are BookieConfig field names, optionally under [bookie])")
    start.add_argument("--metadata-store", dest="metadata_store_url", help="zk://host:port[/chroot] or file://DIR")
    start.add_argument("--data-dir", help="journal and ledger directories go under it")
    start.add_argument("--journal-dir", help="journal directory (default DATA_DIR/journal)")
    start.add_argument("--ledger-dir", help="ledger directory (default DATA_DIR/ledgers)")
    start.add_argument("--host", help="address to bind (default 127.0.0.1)")
    start.add_argument("--advertised-address", help="address clients dial (default: --host)")
    start.add_argument("--port", type=int, help="data protocol port (default 3181)")
    start.add_argument("--advertised-port", type=int, help="port clients dial, when a forwarder listens for this "
                       "bookie elsewhere (default: --port)")
    start.add_argument("--http-port", type=int, help="HTTP port for health and metrics (default 8000)")
    start.add_argument("--network-location", help="/zone/upgradeDomain, used by zone-aware placement")
    start.add_argument("--no-autorecovery", dest="autorecovery_enabled", action="store_const", const=False,
                       help="do not run the auditor candidate and replication worker in this bookie")
    _autorecovery_flags(start)
    for name in _SCRUB_FIELDS:
        start.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None)

    recovery = commands.add_parser("autorecovery", help="run the auditor candidate and a replication worker alone")
    recovery.add_argument("--metadata-store", dest="metadata_store_url", required=True,
                          help="zk://host:port[/chroot] or file://DIR")
    recovery.add_argument("--host", default="127.0.0.1", help="address to bind the HTTP port")
    recovery.add_argument("--http-port", type=int, default=8000, help="HTTP port for /health and /metrics (0: any)")
    recovery.add_argument("--id", dest="owner", default=None, help="name in locks and the auditor node "
                          "(default autorecovery-HOST-PID)")
    recovery.add_argument("--session-timeout-s", type=float, default=None)
    recovery.add_argument("--tls-trust-certs-file", help="bookies serve TLS: the CA certificates (PEM) to check them against")
    recovery.add_argument("--tls-cert-file", help="client certificate (PEM) for bookies that require client authentication")
    recovery.add_argument("--tls-key-file", help="the client certificate's key (PEM)")
    _autorecovery_flags(recovery)

    standalone = commands.add_parser("standalone", help="three bookies (zones a, b, c) in one process on an embedded store")
    standalone.add_argument("--data-dir", default="./data")
    standalone.add_argument("--port", type=int, default=3181, help="first bookie's port; the others follow")
    standalone.add_argument("--http-port", type=int, default=8000, help="first bookie's HTTP port; the others follow")

    readlog = commands.add_parser("readlog", help="list an entry log's records (ledger, entry, offset, length) "
                                  "as JSON lines; reads the files only, the bookie may be running")
    readlog.add_argument("path", help="an entrylog-<id>.log file, or a ledger directory (every entry log in it)")

    shell.add_parser(commands)
    return parser


_SCRUB_FIELDS = ("local_scrub_period_s", "local_scrub_rate_limit_entries_per_s")
_AUTORECOVERY_FIELDS = ("lost_bookie_recovery_delay_s", "open_ledger_rereplication_grace_period_s",
                        "auditor_periodic_check_interval_s", "replication_poll_interval_s")


def _autorecovery_flags(parser: argparse.ArgumentParser) -> None:
    for name in _AUTORECOVERY_FIELDS:
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _use_uvloop()
    keep_large_buffers()
    return COMMANDS[args.command](args)


def _run_servers(args: argparse.Namespace) -> int:
    """`start` and `standalone`: build the configs (exit 2 if invalid), serve until SIGTERM/SIGINT."""
    try:
        configs = _configs(args)
    except (ValueError, OSError) as exc:
        print(f"bookie: invalid configuration: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    return asyncio.run(_serve(configs, standalone=args.command == "standalone"))


def _configs(args) -> list[BookieConfig]:
    if args.command == "start":
        flags = {k: getattr(args, k) for k in ("metadata_store_url", "data_dir", "journal_dir", "ledger_dir", "host",
                                              "advertised_address", "advertised_port", "port", "http_port", "network_location",
                                              "autorecovery_enabled", *_AUTORECOVERY_FIELDS, *_SCRUB_FIELDS)}
        return [load_config(args.config, flags)]
    root = Path(args.data_dir).resolve()
    url = f"file://{root / 'metadata'}"
    return [
        load_config(None, {
            "metadata_store_url": url, "data_dir": str(root / f"bookie-{i}"), "port": args.port + i,
            "http_port": args.http_port + i, "network_location": f"/{zone}/ud{i}",
        })
        for i, zone in enumerate(STANDALONE_ZONES)
    ]


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is a pinned dependency; fall back rather than refuse to run
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(configs: list[BookieConfig], standalone: bool) -> int:
    from storage.bookie.faults import JournalFaults, fault_injection_enabled
    from storage.bookie.process import BookieService
    from storage.metadata import open_store

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    services: list[BookieService] = []
    store = None
    try:
        if standalone:
            Path(configs[0].data_dir).parent.mkdir(parents=True, exist_ok=True)
            store = await open_store(configs[0].metadata_store_url)
        for config in configs:
            # Test and nemesis runs only: a journal whose fsync can be slowed or failed over HTTP.
            fsync = JournalFaults() if fault_injection_enabled() else None
            service = await BookieService.start(config, store=store, fsync=fsync)
            services.append(service)
            print(ready_line(service), flush=True)
    except (BookieStartupError, MetadataError, OSError, ValueError) as exc:
        # ValueError: e.g. a metadata store URL with an unknown scheme (open_store's check).
        print(f"bookie: refusing to start: {exc}", file=sys.stderr, flush=True)
        for service in services:
            await service.stop()
        return EXIT_REFUSED
    if standalone:
        await _self_test(store)
        print(f"standalone ledger store with {len(services)} bookies on {configs[0].metadata_store_url}; "
              "Ctrl-C stops it.\nThe embedded metadata store belongs to this process; `bookie shell` works against "
              "a ZooKeeper-backed cluster:\n  bookie shell --metadata-store zk://127.0.0.1:2181/magnetar listbookies\n"
              "  bookie shell --metadata-store zk://127.0.0.1:2181/magnetar simpletest -e 3 -w 2 -a 2 -n 1000", flush=True)
    await stop.wait()
    failed = False
    for service in reversed(services):
        try:
            await service.stop()
        except StorageError as exc:
            print(f"bookie {service.bookie_id}: error while stopping: {exc}", file=sys.stderr)
            failed = True
    if store is not None:
        await store.close()
    return 1 if failed else 0


def ready_line(service) -> str:
    """The one line a started bookie prints (scripts and tests wait for ' ready (')."""
    c = service.config
    return (f"bookie {c.bookie_id} ready (zone {c.zone}, {c.network_location}; data {c.host}:{service.port}, "
            f"http {c.host}:{service.http_port}; {'read-only' if service.read_only else 'writable'}; "
            f"data dir {c.data_dir})")


async def _self_test(store) -> None:
    """Write, read back and delete one E3/Qw2/Qa2 ledger, so a broken store says so at start."""
    from storage.client.client import LedgerClient

    async with await LedgerClient.open(store) as client:
        await client.registry.wait_for(lambda r: len(r.writable()) >= 3, 10)
        handle = await client.create_ledger(3, 2, 2)
        for i in range(100):
            handle.add_entry_async(f"self-test {i}".encode())
        await handle.close()
        reader = await client.open_ledger(handle.ledger_id, recovery=False)
        entries = await reader.read_entries(0, 99)
        await reader.close()
        await client.delete_ledger(handle.ledger_id)
    ok = [e.payload for e in entries] == [f"self-test {i}".encode() for i in range(100)]
    print(f"self-test: wrote and read back 100 entries on ensemble {', '.join(handle.ensemble)}: "
          f"{'OK' if ok else 'MISMATCH'}", flush=True)


def _run_autorecovery(args: argparse.Namespace) -> int:
    import os
    import socket

    from storage.autorecovery.config import load_autorecovery_config
    from storage.autorecovery.service import run_standalone
    from storage.client.config import ClientConfig

    flags = {k: getattr(args, k) for k in (*_AUTORECOVERY_FIELDS, "session_timeout_s")}
    try:
        config = load_autorecovery_config(flags)
        client_config = ClientConfig(tls_trust_certs_file_path=args.tls_trust_certs_file,
                                     tls_certificate_file_path=args.tls_cert_file,
                                     tls_key_file_path=args.tls_key_file).validate()
    except ValueError as exc:
        print(f"bookie autorecovery: invalid configuration: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    owner = args.owner or f"autorecovery-{socket.gethostname()}-{os.getpid()}"

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_standalone(args.metadata_store_url, config, owner, args.host, args.http_port, stop,
                                 lambda line: print(line, flush=True), client_config)
        except (MetadataError, OSError, ValueError) as exc:
            print(f"bookie autorecovery: refusing to start: {exc}", file=sys.stderr, flush=True)
            return EXIT_REFUSED
        return 0

    return asyncio.run(run())


def _run_readlog(args: argparse.Namespace) -> int:
    import json

    from storage.bookie.entrylog import entry_log_name, scan_file

    path = Path(args.path)
    if path.is_dir():
        ids = sorted(int(p.name[len("entrylog-"):-len(".log")]) for p in path.glob("entrylog-*.log")
                     if p.name[len("entrylog-"):-len(".log")].isdigit())
        files = [path / entry_log_name(i) for i in ids]
    elif path.is_file():
        files = [path]
    else:
        print(f"bookie readlog: no such file or directory: {path}", file=sys.stderr)
        return EXIT_REFUSED
    for file in files:
        for rec in scan_file(file):
            print(json.dumps({"file": str(file), "ledger_id": rec.ledger_id, "entry_id": rec.entry_id,
                              "offset": rec.offset, "length": rec.length}))
    return 0


# One entry per subcommand registered in build_parser(); each takes the parsed args and returns the exit code.
COMMANDS = {
    "start": _run_servers,
    "standalone": _run_servers,
    "shell": shell.run,
    "autorecovery": _run_autorecovery,
    "readlog": _run_readlog,
}


if __name__ == "__main__":
    sys.exit(main())
