"""Console script `broker`: `broker start` joins a cluster, `broker standalone` runs a whole cluster on this machine.

`broker standalone` runs a supervisor with bookie and broker-worker processes
(broker/workers.py; ``--workers N``, default one per core);
``--single-process`` runs everything in one process (broker/standalone.py).

Both print one line containing `` ready (`` once they accept clients (scripts
and tests wait for it) and stop cleanly on SIGINT/SIGTERM. A configuration or
start-up problem exits with status 2 and a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

from broker.config import BrokerConfig, load_config
from broker.security import tokens_cli
from broker.standalone_layout import DEFAULT_BOOKIES, MAX_BOOKIES, check_bookie_count
from broker.workers import default_workers, missing_bookie_dirs, workers_for
from storage.large_buffers import keep_large_buffers

log = logging.getLogger(__name__)

EXIT_REFUSED = 2
FLAG_FIELDS = ("metadata_store_url", "host", "port", "http_port", "advertised_address", "cluster_name", "stream_port")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="broker", description="Magnetar broker: the Apache Pulsar protocol over replicated ledgers")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ... (default INFO)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    start = commands.add_parser("start", help="run a broker that joins a cluster through a zk:// metadata store")
    _common_flags(start)
    start.add_argument("--metadata-store", dest="metadata_store_url", help="zk://host:port[/chroot]")
    start.add_argument("--workers", type=int, default=1, help="broker processes on this host, each a broker of the "
                       "cluster; worker 0 on the given ports, the others on free ones (default 1: this process)")

    standalone = commands.add_parser(
        "standalone", help="embedded metadata store + bookies (3 by default, zones a, b, c) + broker workers, "
                           "persisted under --data-dir")
    _common_flags(standalone)
    standalone.add_argument("--data-dir", default="./data", help="where everything is stored (default ./data)")
    standalone.add_argument("--bookie-http-port", type=int, default=8000,
                            help="first bookie's HTTP port (health, Prometheus /metrics); the others follow "
                                 "(default 8000, BookKeeper's prometheusStatsHttpPort; 0: any free ports)")
    standalone.add_argument("--bookie-port", type=int, default=3181, help="first bookie's port; the others follow (default 3181)")
    standalone.add_argument("--bookies", type=int, default=DEFAULT_BOOKIES,
                            help=f"bookie processes (default {DEFAULT_BOOKIES}; 1..{MAX_BOOKIES}, at least the ledger "
                                 "ensemble size); more spread the storage work over more cores")
    mode = standalone.add_mutually_exclusive_group()
    mode.add_argument("--workers", type=int, help="broker worker processes, each owning a share of the bundles "
                      f"(default: one per core, here {default_workers()}); bookies run in their own processes")
    mode.add_argument("--single-process", action="store_true",
                      help="run the metadata store, the bookies and one broker in this one process")
    tokens_cli.add_parser(commands)
    return parser


def _common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="a Pulsar properties file (standalone.conf / broker.conf key names; .conf, .properties) "
                   "or TOML (BrokerConfig field names, optionally under [broker]; .toml); see docs/configuration.md")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="Pulsar protocol port (default 6650)")
    p.add_argument("--http-port", type=int, help="HTTP admin / metrics port (default 8080)")
    p.add_argument("--stream-port", type=int, help="Stream API (gRPC) port (default 4181)")
    p.add_argument("--advertised-address", help="host name clients are told to dial (default: --host)")
    p.add_argument("--cluster-name", help="cluster name (default standalone)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_REFUSED
    if args.command == "tokens":
        return tokens_cli.run(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    flags = {k: getattr(args, k, None) for k in FLAG_FIELDS}
    try:
        if args.command == "standalone":
            from broker.standalone_layout import metadata_url

            data_dir = Path(args.data_dir)
            flags["metadata_store_url"] = metadata_url(data_dir)
            config = load_config(args.config, flags)
            check_bookie_count(args.bookies, config)
            for name in missing_bookie_dirs(data_dir, args.bookies):
                log.warning("broker standalone: %s/%s holds an earlier run's bookie, not started with --bookies %d: "
                            "ledger replicas stored there are out of reach", data_dir, name, args.bookies)
        else:
            config = load_config(args.config, flags)
            data_dir = None
    except (ValueError, OSError) as exc:
        print(f"broker: invalid configuration: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    if not config.journal_sync_data:
        if data_dir is None:  # broker start: the bookies are their own processes, with their own journal_sync_data
            print("broker: journalSyncData applies to `broker standalone`'s own bookies only; ignored here",
                  file=sys.stderr, flush=True)
        else:
            print("broker standalone: journalSyncData=false: the bookies acknowledge adds before their journals "
                  "reach the disk; a power loss or kernel crash may lose acknowledged messages", flush=True)
    _use_uvloop()
    keep_large_buffers()
    bookie_http_port = getattr(args, "bookie_http_port", 0)
    if data_dir is not None and not args.single_process:
        workers = args.workers
        if workers is None:
            workers, why = workers_for(config, default_workers())
            if why:
                print(f"broker standalone: 1 broker worker ({why}); --workers N with other ports, or "
                      "--single-process", flush=True)
        return asyncio.run(_serve_workers(config, data_dir, args.bookie_port, workers, args.log_level, bookie_http_port,
                                          args.bookies))
    if data_dir is None and args.workers != 1:
        return asyncio.run(_serve_workers(config, None, None, args.workers, args.log_level))
    return asyncio.run(_serve(config, data_dir, getattr(args, "bookie_port", None), bookie_http_port,
                              getattr(args, "bookies", DEFAULT_BOOKIES)))


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # a pinned dependency; fall back rather than refuse to run
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def freeze_startup_heap() -> int:
    """Take what starting built out of every later garbage collection; the count of objects frozen.

    Why: a full (generation 2) collection walks every tracked object, and the ~50,000 the broker holds once it
    has started -- modules, classes, functions, protobuf descriptors -- live as long as the process. Work that
    allocates many short-lived containers (an ACK's ids) triggers a full collection every few seconds; each one
    paused the event loop for 40-160 ms (measured on a busy 2-core machine during an ACK bomb), every client's
    latency with it. Frozen, the walk covers only what was made since: under a millisecond."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def _serve(config: BrokerConfig, data_dir: Path | None, bookie_port: int | None, bookie_http_port: int = 0,
                 bookies: int = DEFAULT_BOOKIES) -> int:
    from broker.errors import BrokerError
    from broker.http import listening_ports, start_http
    from broker.service import BrokerService
    from broker.standalone import Standalone
    from storage.errors import StorageError

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    standalone = None
    broker = None
    http = None
    try:
        if data_dir is not None:
            standalone = await Standalone.start(data_dir, config, bookie_port, bookie_http_port, bookies)
            broker = standalone.broker
        else:
            broker = await BrokerService.start(config)
        http = await start_http(broker, config.host, config.http_port, config.https_port)
        http_port, https_port = listening_ports(http)
    except (BrokerError, StorageError, OSError, ValueError) as exc:
        print(f"broker: refusing to start: {exc}", file=sys.stderr, flush=True)
        if standalone is not None:
            await standalone.stop()
        elif broker is not None:
            await broker.close()
        return EXIT_REFUSED
    if standalone is not None:  # before the ready line, which scripts wait for: then these are there too
        for line in standalone.bookie_lines(config.advertised_address):
            print(line, flush=True)
    freeze_startup_heap()
    mode = f"standalone, data in {data_dir.resolve()}" if data_dir is not None else f"metadata {config.metadata_store_url}"
    print(f"broker {config.broker_id} ready ({ready_urls(config.advertised_address, broker, http_port, https_port)}; "
          f"{mode})", flush=True)
    await stop.wait()
    print("broker: shutting down", flush=True)
    await http.cleanup()
    if standalone is not None:
        await standalone.stop()
    else:
        await broker.close()
    return 0


async def _serve_workers(config: BrokerConfig, data_dir: Path | None, bookie_port: int | None, workers: int,
                         log_level: str, bookie_http_port: int = 0, bookies: int = DEFAULT_BOOKIES) -> int:
    """The multi-process standalone (or, without a data directory, `broker start --workers N`): serve until
    SIGINT/SIGTERM, then stop every child."""
    from broker.errors import BrokerError
    from broker.standalone import standalone_broker_config
    from broker.workers import Supervisor
    from storage.errors import StorageError

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if data_dir is not None:
        data_dir = data_dir.resolve()
        config = standalone_broker_config(config)
    supervisor = Supervisor(data_dir, config, workers, bookie_port, log_level, bookie_http_port, bookies)
    starting = asyncio.create_task(supervisor.start())
    await asyncio.wait([starting, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # a signal during start-up: stop what has started
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        return 0
    try:
        starting.result()
    except (BrokerError, StorageError, OSError, ValueError) as exc:
        print(f"broker: refusing to start: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    first = supervisor.brokers[0].ready_line.split(" ready (", 1)[1].split(";", 1)[0]
    others = ", ".join(c.config.service_url or c.config.service_url_tls for c in supervisor.brokers[1:])
    where = (f"{bookies} bookie process{'es' if bookies > 1 else ''}, data in {data_dir}" if data_dir is not None
             else f"metadata {config.metadata_store_url}")
    print(f"broker {'standalone' if data_dir is not None else 'workers'} ready ({first}; "
          f"{workers} worker{'s' if workers > 1 else ''}{' (also ' + others + ')' if others else ''}, {where})",
          flush=True)
    await stop.wait()
    print("broker: shutting down", flush=True)
    await supervisor.stop()
    return 0


def ready_urls(address: str, broker, http_port: int | None, https_port: int | None) -> str:
    """The listeners of the ready line, as bound: plain first (the order scripts have always read), then TLS."""
    urls = [broker.service_url, f"http://{address}:{http_port}" if http_port is not None else "",
            broker.service_url_tls, f"https://{address}:{https_port}" if https_port is not None else ""]
    return ", ".join(url for url in urls if url)


if __name__ == "__main__":
    sys.exit(main())
