"""`cores` suite: the multi-process standalone with 1 broker worker beside N workers (one per core), in one run.

Each deployment is a fresh `broker standalone --workers K` (3 bookie processes, E2/Qw2/Qa2, fsync on), and
``--single-process`` as a third row for the mode everything else in the benchmarks uses. The same work runs
against each: 2 topics per worker of the N-worker deployment (chosen by lookup so each worker owns as many),
one official `pulsar-client` process per topic, started together:

* **produce**: 100-byte messages, batching, ``block_if_queue_full``; aggregate msg/s from the first start to
  the last finish;
* **catch-up**: each process then drains its topic's backlog from the earliest message (a subscription made
  before the produce phase), aggregate msg/s.

Every server process's CPU time is sampled around each phase, so the JSON also holds CPU seconds per million
messages for the workers, the bookies and the clients. The model in docs/BENCHMARKS.md turns those into the
expected ratio on 8 and 16 cores (``model``): a worker and a bookie are one Python thread each, so
throughput ≤ min(workers / worker_cost, bookies / bookie_cost, cores / (worker_cost + bookie_cost)),
plus the disk's fsync'd bandwidth for produce. The model is given for the default 3 bookie processes and for
the ``--bookies B`` that lets the cores, not the bookies, be the bound (``bookies_for``). Clients are assumed
to run elsewhere in the model.

Child side: ``python -m loadtest.bench.cores client produce|catchup URL TOPIC COUNT BATCH``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import print_table

MESSAGE_BYTES = 100
WARMUP = 5_000
TOPICS_PER_WORKER = 2
BOOKIES = 3
WRITE_QUORUM = 2
WRITES_PER_REPLICA = 2  # journal and entry log
MODEL_CORES = (8, 16)
# (name, client phase, batch size, share of the message count). In this order: the catch-up drains what the
# batched produce wrote; the small batches come after it, so they are not part of that backlog.
PHASES = (("produce", "produce", 1000, 1.0), ("catchup", "catchup", 1000, 1.0), ("produce-small", "produce", 10, 0.1))


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---- the client processes ------------------------------------------------------------------------------


def _client_main(phase: str, url: str, topic: str, count: int, batch: int) -> None:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=60, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    body = b"x" * MESSAGE_BYTES
    if phase == "produce":
        client.subscribe(topic, "bench").close()  # the catch-up phase drains this subscription
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=batch,
                                          batching_max_publish_delay_ms=5, max_pending_messages=50_000,
                                          block_if_queue_full=True, send_timeout_millis=0)
        for _ in range(WARMUP):
            producer.send_async(body, None)
        producer.flush()
    print("ready", flush=True)
    sys.stdin.readline()  # "go": every client starts together
    cpu0, start = time.process_time(), time.time()
    if phase == "produce":
        for _ in range(count):
            producer.send_async(body, None)
        producer.flush()
    else:
        consumer = client.subscribe(topic, "bench", receiver_queue_size=10_000)
        for i in range(count):
            msg = consumer.receive(timeout_millis=60_000)
            if i % 1000 == 999:
                consumer.acknowledge_cumulative(msg)
    end = time.time()
    print(json.dumps({"start": start, "end": end, "cpu_s": time.process_time() - cpu0, "messages": count}), flush=True)
    client.close()


def _run_clients(phase: str, url: str, topics: list[str], count: int, batch: int) -> dict:
    procs = [subprocess.Popen([sys.executable, "-m", "loadtest.bench.cores", "client", phase, url, topic, str(count),
                               str(batch)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for topic in topics]
    try:
        for proc in procs:
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"bench client for {phase} did not start: {line!r}")
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [json.loads(proc.stdout.readline()) for proc in procs]
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(60)
    start, end = min(r["start"] for r in reports), max(r["end"] for r in reports)
    messages = sum(r["messages"] for r in reports)
    return {"messages": messages, "elapsed_s": end - start, "msg_per_s": messages / (end - start),
            "client_cpu_s": sum(r["cpu_s"] for r in reports)}


# ---- one deployment ------------------------------------------------------------------------------------


def _owner(broker, topic: str) -> str:
    with urllib.request.urlopen(f"{broker.web_url}/lookup/v2/topic/persistent/{topic.split('://', 1)[1]}",
                                timeout=60) as resp:
        return json.loads(resp.read())["brokerUrl"]


def _topics(broker, count: int, workers: int, tag: str) -> list[str]:
    """``count`` topics, as many owned by each of ``workers`` workers (by lookup, which assigns the bundle)."""
    per_worker = count // workers
    by_owner: dict[str, list[str]] = {}
    for i in range(1000):
        topic = f"persistent://public/default/bench-cores-{tag}-{i}"
        owned = by_owner.setdefault(_owner(broker, topic), [])
        if len(owned) < per_worker:
            owned.append(topic)
        if sum(len(v) for v in by_owner.values()) == count:
            return [t for ts in by_owner.values() for t in ts]
    raise RuntimeError(f"could not spread {count} topics over {workers} workers: {by_owner}")


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    from storage.testing.processes import cpu_seconds

    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def _costs(before: dict, after: dict, messages: int, client_cpu_s: float) -> dict:
    """CPU seconds per million messages, by kind of process."""
    per_m = 1e6 / messages
    used = {name: after[name] - before[name] for name in after}
    kind = lambda name: "worker" if name.startswith("worker") else "bookie" if name.startswith("bookie") else "all"  # noqa: E731
    out = {"worker_cpu_s_per_m": 0.0, "bookie_cpu_s_per_m": 0.0, "single_process_cpu_s_per_m": 0.0}
    for name, seconds in used.items():
        key = {"worker": "worker_cpu_s_per_m", "bookie": "bookie_cpu_s_per_m", "all": "single_process_cpu_s_per_m"}
        out[key[kind(name)]] += seconds * per_m
    out["client_cpu_s_per_m"] = client_cpu_s * per_m
    out["busiest_worker_cpu_s"] = max((s for n, s in used.items() if kind(n) == "worker"), default=0.0)
    return out


def _deployment(root: Path, label: str, workers: int | None, topics_count: int, count: int) -> dict:
    from storage.testing.processes import BrokerProcess, standalone_children

    broker = BrokerProcess(root / label / "data", workers=workers)
    broker.start(timeout_s=180)
    try:
        pids = standalone_children(broker.proc.pid) if workers else {"standalone": broker.proc.pid}
        topics = _topics(broker, topics_count, workers or 1, label)
        result: dict = {"label": label, "workers": workers, "topics": len(topics)}
        for name, phase, batch, share in PHASES:
            n = int(count * share) + (WARMUP if phase == "catchup" else 0)
            before = _cpu(pids)
            run = _run_clients(phase, broker.service_url, topics, n, batch)
            after = _cpu(pids)
            result[name] = {**run, "batch": batch, **_costs(before, after, run["messages"], run["client_cpu_s"])}
        return result
    finally:
        broker.stop(timeout_s=60)


def _median_run(runs: list[dict]) -> dict:
    """Per phase, the round with the median rate (its CPU figures with it), and every round's rate."""
    out = {"label": runs[0]["label"], "workers": runs[0]["workers"], "topics": runs[0]["topics"]}
    for name, *_ in PHASES:
        ordered = sorted((r[name] for r in runs), key=lambda p: p["msg_per_s"])
        out[name] = {**ordered[len(ordered) // 2], "rounds_msg_per_s": [r[name]["msg_per_s"] for r in runs]}
    return out


# ---- the model -----------------------------------------------------------------------------------------


def capacity_msg_per_s(cores_: int, workers: int, worker_cpu_s_per_m: float, bookie_cpu_s_per_m: float,
                       disk_bytes_per_s: float | None, message_bytes: int = MESSAGE_BYTES,
                       bookies: int = BOOKIES) -> dict:
    """The model: each limit in msg/s, and the least of them. A worker and a bookie are one Python thread each
    (a process per worker; ``bookies`` bookie processes sharing the entries evenly, so their summed CPU per
    message -- ``bookie_cpu_s_per_m``, Qw replicas' work -- does not depend on how many there are); every process
    needs CPU from the same ``cores_``; a produced message is fsync'd in WRITE_QUORUM journals on one disk (the
    entry logs are written later in large unsynced writes, and are left out)."""
    w, b = worker_cpu_s_per_m / 1e6, bookie_cpu_s_per_m / 1e6
    limits = {  # "cores" first: when the bookies (or workers) exactly fill their share, the cores are the bound
        "cores": cores_ / (w + b) if w + b else float("inf"),
        "workers": workers / w if w else float("inf"),
        "bookies": bookies / b if b else float("inf"),
    }
    if disk_bytes_per_s:
        limits["disk"] = disk_bytes_per_s / (message_bytes * WRITE_QUORUM)
    bound = min(limits, key=limits.get)
    return {"msg_per_s": limits[bound], "bound_by": bound, "limits": limits}


def bookies_for(cores_: int, worker_cpu_s_per_m: float, bookie_cpu_s_per_m: float) -> int:
    """The ``--bookies`` for a worker per core on ``cores_`` cores: the fewest (at least the default 3) whose
    capacity, bookies / bookie cost, reaches what the cores can give, cores / (worker + bookie cost); the bookies
    then take about their share of the CPU per message."""
    total = worker_cpu_s_per_m + bookie_cpu_s_per_m
    if total <= 0:
        return BOOKIES
    return max(BOOKIES, math.ceil(cores_ * bookie_cpu_s_per_m / total - 1e-9))


def model(reference: dict, disk_bytes_per_s: float) -> dict:
    """From the 1-worker run's CPU per message: N workers against 1 on bigger machines, with this one disk and with
    a disk that is never the limit (clients run elsewhere); N workers with the default 3 bookies
    (``n_workers``) and with ``bookies_for`` bookies (``n_workers_more_bookies``)."""
    out = {}
    for name, phase, *_ in PHASES:
        costs = reference[name]
        rows = {}
        for n in MODEL_CORES:
            row = {}
            for disk_label, disk in (("this_disk", disk_bytes_per_s if phase == "produce" else None), ("cpu_only", None)):
                w, b = costs["worker_cpu_s_per_m"], costs["bookie_cpu_s_per_m"]
                one = capacity_msg_per_s(n, 1, w, b, disk)
                many = capacity_msg_per_s(n, n, w, b, disk)
                bookies = bookies_for(n, w, b)
                more = {**capacity_msg_per_s(n, n, w, b, disk, bookies=bookies), "bookies": bookies}
                row[disk_label] = {"one_worker": one, "n_workers": many, "ratio": many["msg_per_s"] / one["msg_per_s"],
                                   "n_workers_more_bookies": more,
                                   "ratio_more_bookies": more["msg_per_s"] / one["msg_per_s"]}
            rows[str(n)] = row
        out[name] = rows
    return out


def run(quick: bool = False, rounds: int | None = None) -> dict:
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-cores-"))
    n = cores()
    count = 20_000 if quick else 200_000
    rounds = rounds or (1 if quick else 3)
    topics = TOPICS_PER_WORKER * max(n, 1)
    disk = fsync_bandwidth(root, 64 * 1024, 1.0 if quick else 3.0)
    results: dict = {"cores": n, "disk_64k": disk}
    deployments = [("single-process", None), ("1-worker", 1)] + ([(f"{n}-workers", n)] if n > 1 else [])
    runs: dict[str, list[dict]] = {label: [] for label, _ in deployments}
    for i in range(rounds):  # round-robin, so the shared machine's drift hits every deployment alike
        for label, workers in deployments:
            runs[label].append(_deployment(root / f"round-{i}", label, workers, topics, count))
    for label, _ in deployments:
        results[label] = _median_run(runs[label])
    ref = results["1-worker"]
    for label, _ in deployments:
        for name, *_ in PHASES:
            results[label][name]["ratio_to_1_worker"] = results[label][name]["msg_per_s"] / ref[name]["msg_per_s"]
    results["model"] = model(ref, disk["mb_per_s"] * 1e6)
    results["config"] = {"ensemble": 2, "write_quorum": 2, "ack_quorum": 2, "bookies": BOOKIES, "fsync": True,
                         "message_bytes": MESSAGE_BYTES, "messages_per_topic": count, "topics": topics,
                         "rounds": rounds, "phases": [list(p) for p in PHASES],
                         "client": "pulsar-client (official), one process per topic", "quick": quick,
                         "deployment": "broker standalone --workers K (bookie processes) and --single-process"}
    _print(results, [label for label, _ in deployments])
    return results


def _print(r: dict, labels: list[str]) -> None:
    rows = []
    for label in labels:
        d = r[label]
        for name, *_ in PHASES:
            p = d[name]
            rows.append({"deployment": label, "phase": name, "msg/s": p["msg_per_s"],
                         "ratio_to_1_worker": p["ratio_to_1_worker"],
                         "rounds": " ".join(f"{v / 1000:.0f}k" for v in p["rounds_msg_per_s"]),
                         "worker_cpu_s/M": p["worker_cpu_s_per_m"] or p["single_process_cpu_s_per_m"],
                         "bookie_cpu_s/M": p["bookie_cpu_s_per_m"], "client_cpu_s/M": p["client_cpu_s_per_m"]})
    print_table(f"use every core: {r['config']['topics']} topics, one client process each, 100 B, E2/Qw2/Qa2, "
                f"{r['cores']} cores, median of {r['config']['rounds']} (reference: 1 worker, same run)", rows,
                ["deployment", "phase", "msg/s", "ratio_to_1_worker", "rounds", "worker_cpu_s/M", "bookie_cpu_s/M",
                 "client_cpu_s/M"])
    model_rows = []
    for name, by_cores in r["model"].items():
        for n, row in by_cores.items():
            for disk_label, m in row.items():
                if name == "catchup" and disk_label == "this_disk":
                    continue  # no disk term for reads
                model_rows.append({"phase": name, "cores": n, "disk": disk_label,
                                   "1 worker msg/s": m["one_worker"]["msg_per_s"], "bound": m["one_worker"]["bound_by"],
                                   "N workers msg/s": m["n_workers"]["msg_per_s"], "bound ": m["n_workers"]["bound_by"],
                                   "ratio": m["ratio"], "--bookies": m["n_workers_more_bookies"]["bookies"],
                                   "N workers, --bookies msg/s": m["n_workers_more_bookies"]["msg_per_s"],
                                   "bound  ": m["n_workers_more_bookies"]["bound_by"],
                                   "ratio ": m["ratio_more_bookies"]})
    print_table(f"model (from the 1-worker run's CPU per message; clients elsewhere; disk "
                f"{r['disk_64k']['mb_per_s']:.0f} MB/s fsync'd in 64 KiB writes)", model_rows,
                ["phase", "cores", "disk", "1 worker msg/s", "bound", "N workers msg/s", "bound ", "ratio", "--bookies",
                 "N workers, --bookies msg/s", "bound  ", "ratio "])


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "client":
        _client_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit("usage: python -m loadtest.bench.cores client produce|catchup URL TOPIC COUNT BATCH")
