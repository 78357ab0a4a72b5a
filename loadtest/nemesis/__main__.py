"""``python -m loadtest.nemesis [--seed S] [--rounds N] [--standalone] [--linearizable] [--faults K,K] [--report DIR]``

Starts a real cluster (cluster.py), runs the workload (workload.py) while a seeded schedule injects and heals
faults (schedule.py), reads everything back, and checks the history (checker.py). Prints the seed first and,
when the checker finds a violation, the one-line command that replays the run. Writes the history
(JSON lines) and a JSON result; ``--report DIR`` also writes the "Nemesis" section of DIR/BENCHMARKS.md
(``--report-from RESULT.json --report DIR`` writes it from a result saved before, with no cluster).
Exit status: 0 when every violation count is 0, 1 otherwise, 2 when the cluster or a fault failed.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

from loadtest.bench.report import machine, print_table
from loadtest.nemesis.checker import COUNTS, VIOLATIONS, check
from loadtest.nemesis.cluster import NemesisCluster
from loadtest.nemesis.history import History
from loadtest.nemesis.schedule import FAULT_KINDS, FaultError, Nemesis, plan
from loadtest.nemesis.workload import PRODUCERS, Workload, prepare
from storage.testing.waiting import wait_until


def replay_command(args: argparse.Namespace) -> str:
    words = ["python", "-m", "loadtest.nemesis", "--seed", str(args.seed), "--rounds", str(args.rounds)]
    if args.standalone:
        words.append("--standalone")
    if args.linearizable:
        words.append("--linearizable")
    if args.faults:
        words += ["--faults", args.faults]
    if args.rate != 20.0:
        words += ["--rate", f"{args.rate:g}"]
    return shlex.join(words)


def applicable_kinds(cluster, only: str | None) -> dict:
    wanted = [k.strip() for k in only.split(",") if k.strip()] if only else None
    unknown = sorted(set(wanted or ()) - set(FAULT_KINDS))
    if unknown:
        raise SystemExit(f"unknown fault kinds {unknown}; known: {', '.join(sorted(FAULT_KINDS))}")
    kinds = {n: c for n, c in FAULT_KINDS.items() if (wanted is None or n in wanted) and c().applicable(cluster)}
    if not kinds:
        raise SystemExit("no fault kind applies to this cluster")
    return kinds


def run(args: argparse.Namespace, log=print) -> dict:
    """One whole run; returns the result document (also written to ``args.out``)."""
    out_dir = Path(args.out_dir or f"results/nemesis-{args.seed}")
    out_dir.mkdir(parents=True, exist_ok=True)
    history = History(out_dir / "history.jsonl")
    started = time.monotonic()
    result: dict = {"seed": args.seed, "rounds": args.rounds, "replay": replay_command(args),
                    "history": str(out_dir / "history.jsonl")}
    with NemesisCluster(standalone=args.standalone, keep=args.keep) as cluster:
        kinds = applicable_kinds(cluster, args.faults)
        budget_bookies = cluster.bookie_faults_tolerated
        budget_brokers = max(0, len(cluster.brokers) - 1) if cluster.brokers else 1
        rounds = plan(args.seed, args.rounds, kinds, budget_bookies, budget_brokers)
        log(f"cluster: {cluster.describe()} (scratch {cluster.root})")
        log(f"schedule: at most {budget_bookies} bookie fault(s) at once (write quorum {cluster.write_quorum} - "
            f"ack quorum {cluster.ack_quorum}), at most {budget_brokers} broker(s); kinds: {', '.join(kinds)}")
        result.update(cluster=cluster.describe(), bookie_budget=budget_bookies,
                      plan=[{"kinds": list(r.kinds), "hold_s": r.hold_s, "quiet_s": r.quiet_s} for r in rounds])
        prepare(cluster.web_url)
        workload = Workload(history, cluster.service_urls, rate_per_s=args.rate)
        nemesis = Nemesis(cluster, history, args.seed, log=log)
        try:
            workload.start()
            def acked() -> set[str]:
                return {e["process"] for e in history.events() if e["f"] == "send" and e["type"] == "ok"}

            wait_until(lambda: len(acked()) == len(PRODUCERS), 60, lambda: f"every producer's first ack (have {acked()})")
            nemesis.run(rounds, kinds)
            log("faults done; draining the consumers")
            result["drained"] = workload.stop_and_drain(timeout_s=90)
            if workload.stuck_producers:
                result["stuck_producers"] = workload.stuck_producers
                log(f"producers that could not finish their sends: {', '.join(workload.stuck_producers)}")
            log("final reads")
            workload.final_reads()
        except (FaultError, TimeoutError) as exc:
            result["error"] = str(exc)
            log(f"ERROR: {exc}")
            log("logs: " + " ".join(str(p) for p in cluster.logs()[:12]))
        finally:
            workload.close()
        result["faults"] = nemesis.injected
    history.close()
    report = check(history.events(), linearizable=args.linearizable)
    result.update(report.to_json())
    result["duration_s"] = round(time.monotonic() - started, 1)
    result["machine"] = machine()
    (out_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def print_result(result: dict) -> None:
    f = result["findings"]
    rows = [{"check": k, "count": f[k]["count"], "must be 0": "yes" if k in VIOLATIONS else "",
             "example": json.dumps(f[k]["examples"][:1])[:90] if f[k]["count"] else ""} for k in (*VIOLATIONS, *COUNTS)]
    print_table(f"nemesis seed {result['seed']}: checker", rows, ["check", "count", "must be 0", "example"])
    print_table("operations", [{"operation": k, "count": v} for k, v in result["operations"].items()],
                ["operation", "count"])
    rows = [{"fault": k, "injected": result.get("faults", {}).get(k, 0), **{q: v.get(q) for q in ("p50", "p90", "max")}}
            for k, v in result["unavailability_s"].items()]
    print_table("unavailability: longest gap between acks of one producer during a fault (s)", rows,
                ["fault", "injected", "p50", "p90", "max"])


def check_only(path: str, linearizable: bool) -> int:
    from loadtest.nemesis.history import load

    events = load(path)
    report = check(events, linearizable=linearizable)
    faults: dict[str, int] = {}
    for e in events:
        if e.get("f") == "fault" and e["type"] == "invoke":
            faults[e["kind"]] = faults.get(e["kind"], 0) + 1
    print_result({"seed": path, "faults": faults, **report.to_json()})
    print(f"\n{'OK: no violation' if report.valid else 'FAILED ' + str({k: v for k, v in report.violations.items() if v})}")
    return 0 if report.valid else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.nemesis", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: a random one, printed)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--standalone", action="store_true", help="attack one `broker standalone` instead")
    parser.add_argument("--linearizable", action="store_true",
                        help="also check the single-writer topic: acknowledged order == read order, no reader "
                             "going backwards")
    parser.add_argument("--faults", default=None, metavar="KIND,KIND", help="only these fault kinds")
    parser.add_argument("--rate", type=float, default=20.0, help="sends per second per producer")
    parser.add_argument("--out-dir", default=None, help="history and result.json (default results/nemesis-SEED)")
    parser.add_argument("--report", default=None, metavar="DIR", help="write the Nemesis section of DIR/BENCHMARKS.md")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's scratch directory (logs, data)")
    parser.add_argument("--report-from", default=None, metavar="RESULT",
                        help="no cluster: write the Nemesis section of --report DIR from a result.json written before")
    parser.add_argument("--check", default=None, metavar="HISTORY",
                        help="no cluster: run the checker on a history file written before, print its findings")
    args = parser.parse_args(argv)
    if args.check:
        return check_only(args.check, args.linearizable)
    if args.report_from:
        if not args.report:
            parser.error("--report-from needs --report DIR")
        from loadtest.nemesis.markdown import write_section

        print(f"report written to {write_section(json.loads(Path(args.report_from).read_text()), args.report)}")
        return 0
    if args.rounds < 1 or args.rounds > 10_000:
        parser.error("--rounds must be in 1..10000")
    if not 0.1 <= args.rate <= 1000:
        parser.error("--rate must be in 0.1..1000 sends/s")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**31)
    print(f"seed {args.seed}; replay: {replay_command(args)}", flush=True)
    result = run(args, log=lambda line: print(line, flush=True))
    print_result(result)
    print(f"\nhistory {result['history']}; result {Path(result['history']).with_name('result.json')}")
    if args.report:
        from loadtest.nemesis.markdown import write_section

        print(f"report written to {write_section(result, args.report)}")
    if "error" in result:
        print(f"\nFAILED (the cluster or a fault): {result['error']}\nreplay: {result['replay']}")
        return 2
    if not result["valid"]:
        bad = {k: v["count"] for k, v in result["findings"].items() if k in VIOLATIONS and v["count"]}
        print(f"\nFAILED {bad}\nreplay: {result['replay']}")
        return 1
    print(f"\nOK: no violation in {args.rounds} rounds (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
