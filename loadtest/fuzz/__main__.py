"""``python -m loadtest.fuzz --target pulsar-frame|bookie-request --runs N``: coverage-guided fuzzing with atheris.

The command runs libFuzzer (through atheris, which instruments the decoder modules' Python bytecode so that
libFuzzer sees which branches an input reached) in a child process, starting from a seed corpus of valid
encodings, then prints what the run did: inputs tried, coverage (libFuzzer's ``cov``: instrumented edges
reached; ``ft``: features, edges refined by hit counts), corpus size, crashes. A crash is any exception
other than the decoder's documented errors (see loadtest.fuzz.targets); libFuzzer stops at the first one
and writes the input to ``--artifacts`` (``crash-<sha1>``), which the report names. Exit status 0 means no
crash. ``--json PATH`` also writes the summary as JSON.

The child is this module with ``--child``: atheris takes over the process (libFuzzer exits it at the end),
so the parent is what reads libFuzzer's report and outlives it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadtest.fuzz.report import parse_libfuzzer
from loadtest.fuzz.targets import TARGETS

DEFAULT_MAX_LEN = 4096


def _child(args) -> None:
    import atheris

    target = TARGETS[args.target]
    with atheris.instrument_imports(include=list(target.modules)):
        for module in target.modules:
            __import__(module)
    libfuzzer_args = [sys.argv[0], f"-runs={args.runs}", f"-seed={args.seed}", f"-max_len={args.max_len}",
                      "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
                      f"-artifact_prefix={args.artifacts}/", args.corpus]
    atheris.Setup(libfuzzer_args, target.run)
    atheris.Fuzz()


def _parent(args) -> int:
    target = TARGETS[args.target]
    Path(args.artifacts).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{args.target}-") as tmp:
        corpus = Path(args.corpus or Path(tmp) / "corpus")
        corpus.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(target.seeds()):
            (corpus / f"seed-{i}").write_bytes(seed)
        cmd = [sys.executable, "-m", "loadtest.fuzz", "--child", "--target", args.target, "--runs", str(args.runs),
               "--seed", str(args.seed), "--max-len", str(args.max_len), "--artifacts", str(args.artifacts),
               "--corpus", str(corpus)]
        started = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        elapsed = time.monotonic() - started
    result = parse_libfuzzer(proc.stdout)
    summary = {"target": args.target, "runs_asked": args.runs, "inputs_tried": result.runs, "seconds": round(elapsed, 1),
               "coverage_edges": result.cov, "features": result.ft, "corpus": result.corpus,
               "crashes": len(result.crash_files) or int(result.crashed), "crash_files": result.crash_files,
               "exit_status": proc.returncode, "seed": args.seed, "max_len": args.max_len}
    if proc.returncode != 0 or result.crashed or args.verbose:
        print(proc.stdout[-20000:], file=sys.stderr)
    for key, value in summary.items():
        print(f"{key:>15}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    ok = proc.returncode == 0 and not result.crashed and result.runs is not None
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, choices=sorted(TARGETS))
    parser.add_argument("--runs", type=int, default=100_000, help="inputs to try (libFuzzer -runs)")
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed (same seed, same run)")
    parser.add_argument("--max-len", type=int, default=DEFAULT_MAX_LEN, help="longest input libFuzzer makes")
    parser.add_argument("--corpus", help="corpus directory to start from and grow (default: a temporary one)")
    parser.add_argument("--artifacts", default="results/fuzz", help="where crash inputs are written")
    parser.add_argument("--json", help="also write the summary here")
    parser.add_argument("--verbose", action="store_true", help="print libFuzzer's own output")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.max_len < 1:
        parser.error("--runs and --max-len must be positive")
    if args.child:
        _child(args)
        return 0
    return _parent(args)


if __name__ == "__main__":
    sys.exit(main())
