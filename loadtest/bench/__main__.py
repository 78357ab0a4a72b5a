"""Entry point: ``python -m loadtest.bench SUITE [--quick] [--out results/bench-SUITE.json]``.

Suites: ``ledger`` (the ledger store alone); ``broker`` (every broker figure in one run, standalone),
``broker-cluster`` (the same against ZooKeeper + 3 bookie processes + `broker start`), or one of
``produce``, ``latency``, ``e2e``, ``catchup``, ``topics`` (the official client against `broker standalone`);
``client``, ``failover``, ``recovery``, ``peers``, ``spark``, ``cursor`` (a cursor's ack state with 1,000,000 holes),
``tls`` (produce over pulsar+ssl:// beside pulsar://);
``compaction`` (compaction throughput and the compacted read rate beside the topic's catch-up read);
``hostile`` (a good client's publish p99 and the broker's RSS while hostile clients attack it);
``streams`` (the Stream API over gRPC beside the same work through the Pulsar protocol);
``cores`` (the multi-process standalone: 1 broker worker beside one per core, produce and catch-up);
``all`` runs every suite, and ``all --report docs/`` writes
docs/BENCHMARKS.md with its charts (the Nemesis section, from its own long run, is carried over from the page
it replaces; ``python -m loadtest.nemesis --report-from RESULT.json --report docs/`` renders it from a saved result).

A full ``all`` takes an estimated 23-28 minutes on a quiet 2-core machine, most of it in cores (5-7 min, 3 rounds
of three deployments), the broker suite (10,000 idle topics take 2-5 of its 4-7 min; 8.4 min at load average 19),
peers (about 3 min, most of it the RabbitMQ quorum queue's 400,000 confirms) and hostile (about 3 min of attack and
quiet windows); ``--rounds 2`` saves about 3 minutes.
``--rounds N`` sets the rounds of the suites that repeat their phases (``ROUNDS_SUITES``); every round measures its
own reference, so fewer rounds widen the spread without weakening a comparison.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile

from loadtest.bench.report import write_json

SUITES = {"ledger": ("loadtest.bench.ledger", None), "broker": ("loadtest.bench.broker", None)}
SUITES.update({name: ("loadtest.bench.broker", (name,)) for name in ("produce", "latency", "e2e", "catchup", "topics")})
SUITES["broker-cluster"] = ("loadtest.bench.broker", None)
SUITES["client"] = ("loadtest.bench.client", None)
SUITES["failover"] = ("loadtest.bench.failover", None)
SUITES["peers"] = ("loadtest.bench.peers", None)
SUITES["spark"] = ("loadtest.bench.spark", None)
SUITES["cursor"] = ("loadtest.bench.cursor", None)
SUITES["recovery"] = ("loadtest.bench.recovery", None)
SUITES["tls"] = ("loadtest.bench.tls", None)
SUITES["hostile"] = ("loadtest.bench.hostile", None)
SUITES["compaction"] = ("loadtest.bench.compaction", None)
SUITES["streams"] = ("loadtest.bench.streams", None)
SUITES["cores"] = ("loadtest.bench.cores", None)
SUITES["all"] = ("loadtest.bench.all", None)
ROUNDS_SUITES = ("ledger", "client", "tls", "compaction", "cores")  # run() takes ``rounds``
MAX_ROUNDS = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--quick", action="store_true", help="a short run (seconds), for smoke tests")
    parser.add_argument("--out", default=None, help="JSON output path (default results/bench-<suite>.json)")
    parser.add_argument("--report", default=None, metavar="DIR",
                        help="with `all`: write DIR/BENCHMARKS.md and its PNG charts from the results")
    parser.add_argument("--rounds", type=int, default=None, metavar="N",
                        help=f"rounds for the suites that repeat their phases ({', '.join(ROUNDS_SUITES)}; "
                             f"1..{MAX_ROUNDS}); each round measures its own reference, so fewer rounds mean a wider "
                             "spread, not a weaker comparison")
    parser.add_argument("--only", default=None, metavar="SUITE,SUITE",
                        help="with `all`: run only these suites (the report covers what ran)")
    parser.add_argument("--deployment", choices=("default", "single-process"), default=None,
                        help="with `hostile`: a bare `broker standalone` (default: supervisor, bookie processes, a "
                        "worker per core) or `broker standalone --single-process`")
    parser.add_argument("--attacks", default=None, metavar="ATTACK,ATTACK",
                        help="with `hostile`: run only these attacks (ack_bomb, poison_batch, silent_connections, "
                        "producer_creates, far_future_acks, big_messages_unread)")
    args = parser.parse_args(argv)
    if (args.report or args.only) and args.suite != "all":
        parser.error("--report and --only need the `all` suite")
    if args.rounds is not None and not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be 1..{MAX_ROUNDS}")
    if args.rounds is not None and args.suite not in ("all", *ROUNDS_SUITES):
        parser.error(f"--rounds applies to all and to {', '.join(ROUNDS_SUITES)}")
    if (args.deployment or args.attacks) and args.suite != "hostile":
        parser.error("--deployment and --attacks need the `hostile` suite")
    module, only = SUITES[args.suite]
    kwargs = {"only": only} if only else {}
    if args.only:
        kwargs["only"] = tuple(name.strip() for name in args.only.split(",") if name.strip())
    if args.rounds is not None:
        kwargs["rounds"] = args.rounds
    if args.suite == "broker-cluster":
        kwargs["cluster"] = True
    if args.deployment:
        kwargs["deployment"] = args.deployment
    if args.attacks:
        kwargs["attacks_to_run"] = tuple(name.strip() for name in args.attacks.split(",") if name.strip())
    # Every suite makes its data directories with tempfile: put them all in one scratch directory that goes when
    # the run ends (a full run writes gigabytes; left behind, they once filled the disk under the test suite).
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-", ignore_cleanup_errors=True) as scratch:
        tempfile.tempdir = scratch
        try:
            results = importlib.import_module(module).run(quick=args.quick, **kwargs)
        finally:
            tempfile.tempdir = None
    path = write_json(args.out or f"results/bench-{args.suite}.json", args.suite, results)
    print(f"\nJSON written to {path}")
    if args.report:
        from loadtest.bench.markdown import write_report

        command = ("python -m loadtest.bench all" + (" --quick" if args.quick else "")
                   + (f" --rounds {args.rounds}" if args.rounds else "") + f" --report {args.report}")
        report = write_report(json.loads(path.read_text()), args.report, command)
        print(f"report written to {report}")
    failed = [name for name, r in results.items() if isinstance(r, dict) and "error" in r] if args.suite == "all" else []
    if failed:
        print(f"suites that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
