"""`python -m tests.cluster [--brokers M] [--bookies N] [--session-timeout S]`: a whole cluster on loopback.

A real ZooKeeper, N bookie processes spread over zones a, b, c and M `broker start` processes, started
through the same harness the tests use. Then a small prompt drives faults:

    status                      every member, its URLs and whether it runs
    kill broker|bookie I        SIGKILL
    pause broker|bookie I       SIGSTOP (resume with `resume`)
    resume broker|bookie I      SIGCONT
    restart broker|bookie I     stop (or reap) and start again on the same ports and data
    quit                        stop everything
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from storage.testing.processes import BookieCluster, BrokerProcess
from storage.testing.zookeeper import ZooKeeperServer


def _status(zk, bookies, brokers) -> None:
    print(f"zookeeper  {zk.url('/magnetar')}")
    for i, b in enumerate(bookies.bookies):
        print(f"bookie {i}   {b.bookie_id:22} zone {b.zone:7} {'up' if b.alive else 'DOWN'}")
    for i, b in enumerate(brokers):
        print(f"broker {i}   {b.service_url:28} {b.web_url:26} {'up' if b.alive else 'DOWN'}")


def _member(bookies, brokers, kind: str, index: str):
    group = brokers if kind == "broker" else bookies.bookies
    return group[int(index)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=4.0, help="brokers' metadata session timeout (s)")
    parser.add_argument("--root", default=None, help="where data and logs go (default: a new temp dir)")
    args = parser.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="magnetar-cluster-"))
    env = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": str(args.session_timeout)}
    with ZooKeeperServer(root / "zk") as zk:
        bookies = BookieCluster(zk.url("/magnetar"), root / "bookies", count=args.bookies).start()
        brokers = [BrokerProcess(root / f"broker-{i}", metadata_url=bookies.metadata_url, env=dict(env))
                   for i in range(args.brokers)]
        try:
            for b in brokers:
                b.spawn()
            for b in brokers:
                b.wait_healthy(60)
            print(f"cluster up (data and logs in {root})")
            _status(zk, bookies, brokers)
            for line in sys.stdin:
                words = line.split()
                if not words:
                    continue
                try:
                    if words[0] == "quit":
                        break
                    if words[0] == "status":
                        _status(zk, bookies, brokers)
                        continue
                    action, kind, index = words
                    member = _member(bookies, brokers, kind, index)
                    {"kill": member.kill9, "pause": member.pause, "resume": member.resume,
                     "restart": lambda: member.restart(60)}[action]()
                    print(f"{action} {kind} {index}: done")
                except (KeyError, ValueError, IndexError) as exc:
                    print(f"cannot do {line.strip()!r}: {exc}; see --help")
        finally:
            for b in brokers:
                b.stop()
            bookies.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
