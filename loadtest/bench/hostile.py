"""`hostile` suite: a well-behaved client's publish latency while hostile clients attack the same broker.

One `broker standalone`, as an operator starts it (``--deployment default``: a supervisor, three bookie processes
and a broker worker per core), or ``--deployment single-process`` (everything in one process) for comparison.
A good client -- the official `pulsar-client`, a producer at a steady 1,000
msg/s (open loop: latency counts from each message's scheduled send time) and a consumer acking what it gets --
runs for the whole suite. The attacks (loadtest.bench.hostile_attacks) run one after another, each in a child
process of this bench, and each is preceded by a quiet window with no attack. The attackers find the worker
that owns the good client's topic with LOOKUP, as the good client does, so both meet on that worker. The reference is the good
client's p99 publish latency over all quiet windows of the same run; each attack's figure is its p99 over the
messages scheduled while the attack ran, and the ratio of the two.

Per attack: the peak of the broker's RSS summed over its process tree (VmRSS of each process sampled every
20 ms), and the largest single process's peak (the higher of its samples and its VmHWM, reset at the start of
each window through /proc/PID/clear_refs); whether the broker stayed up (every process alive, /health answering,
and a new connection's CONNECT and PING answered by the topic's worker), and what the attacker was told.
Targets: the broker never dies, RSS (the sum) < 1 GiB, the good client's p99 within 5x its no-attack p99.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import resource
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from loadtest.bench.report import latency_summary_ms, print_table
from storage.testing.processes import process_tree

RATE_PER_S = 1000
MESSAGE_BYTES = 100
RSS_TARGET_MB = 1024  # the sum over the broker's process tree
# --deployment: BrokerProcess's ``workers`` for each. "default" is a bare `broker standalone` (a supervisor, 3 bookie
# processes and a broker worker per core); "single-process" is `broker standalone --single-process`.
DEPLOYMENTS = {"default": "default", "single-process": None}
RATIO_TARGET = 5.0
ATTACK_ORDER = ("ack_bomb", "poison_batch", "silent_connections", "producer_creates", "far_future_acks",
                "big_messages_unread")
FD_WANTED = 2000 * 2 + 1024  # the silent connections' two ends (attacker and broker both inherit it) and headroom


def raise_fd_limit() -> dict:
    """Raise this process's soft open-files limit to its hard limit; the broker and the attacker inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, FD_WANTED)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    got = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return {"soft_before": soft, "hard": hard, "soft": got, "enough": got >= FD_WANTED}


class _RssWatch:
    """The resident memory of the broker's process tree (one process with --single-process; the supervisor, its
    bookies and workers otherwise), sampled every 20 ms: the peak of the sum over the tree, and the peak of the
    largest single process (the higher of its sampled VmRSS and its VmHWM, reset with ``reset()``)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.pids = process_tree(pid)
        self.peak_sum_kb = 0
        self.peak_kb: dict[int, int] = {}
        self.hwm_resettable = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _field_kb(pid: int, name: str) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(name + ":"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            rss = {pid: self._field_kb(pid, "VmRSS") for pid in self.pids}
            self.peak_sum_kb = max(self.peak_sum_kb, sum(rss.values()))
            for pid, kb in rss.items():
                self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), kb)

    def reset(self) -> None:
        self.pids = process_tree(self.pid)  # the same processes unless one died and was replaced
        rss = {pid: self._field_kb(pid, "VmRSS") for pid in self.pids}
        self.peak_sum_kb, self.peak_kb = sum(rss.values()), rss
        for pid in self.pids:
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # "5": reset the peak RSS (VmHWM)
            except OSError:
                self.hwm_resettable = False

    def peak_mb(self) -> dict:
        largest = {pid: max(kb, self._field_kb(pid, "VmHWM") if self.hwm_resettable else 0)
                   for pid, kb in self.peak_kb.items()}
        biggest = max(largest, key=largest.get, default=self.pid)
        return {"rss_peak_mb": self.peak_sum_kb / 1024, "rss_largest_process_peak_mb": largest.get(biggest, 0) / 1024,
                "rss_largest_process": _process_name(biggest), "processes": len(self.pids),
                "hwm_resettable": self.hwm_resettable,
                "rss_now_mb": sum(self._field_kb(pid, "VmRSS") for pid in self.pids) / 1024}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _process_name(pid: int) -> str:
    """``worker-0``, ``bookie-a``, ... for a standalone's child (its argument after broker.worker_child), else
    the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    if b"broker.worker_child" in argv and argv.index(b"broker.worker_child") + 1 < len(argv):
        return argv[argv.index(b"broker.worker_child") + 1].decode()
    return " ".join(Path(a.decode()).name for a in argv[:2] if a)


class _GoodClient:
    """The official client at a steady rate: (scheduled time, publish latency or None on failure) per message."""

    def __init__(self, url: str, rate_per_s: int):
        import pulsar

        self.client = pulsar.Client(url, operation_timeout_seconds=60, io_threads=2,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.topic = f"persistent://public/default/bench-hostile-good-{time.time_ns()}"
        self.consumer = self.client.subscribe(self.topic, "good", receiver_queue_size=1000)
        self.producer = self.client.create_producer(self.topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                                    max_pending_messages=50_000, block_if_queue_full=True)
        self.rate = rate_per_s
        self.published: list[tuple[float, float | None]] = []
        self.received: list[float] = []  # receive times
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        import pulsar

        start = time.perf_counter() + 0.05
        i = 0
        while not self._stop.is_set():
            due = start + i / self.rate
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.001))  # pacing the schedule, not synchronisation

            def done(res, _mid, d=due):
                self.published.append((d, time.perf_counter() - d if res == pulsar.Result.Ok else None))

            self.producer.send_async(b"x" * MESSAGE_BYTES, done)
            i += 1

    def _consume(self) -> None:
        import pulsar

        while not self._stop.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            self.received.append(time.perf_counter())
            self.consumer.acknowledge(msg)

    def stop(self) -> None:
        self._stop.set()
        self._threads[0].join(30)
        self.producer.flush()
        self._threads[1].join(30)
        self.client.close()

    def window(self, start: float, end: float) -> dict:
        """Publish latency of the messages scheduled in [start, end), and what the consumer got meanwhile."""
        lat = [lat for due, lat in self.published if start <= due < end and lat is not None]
        failed = sum(1 for due, lat in self.published if start <= due < end and lat is None)
        out = {k: v for k, v in latency_summary_ms(lat).items()}
        out.update({"published": len(lat), "failed": failed,
                    "received": sum(1 for t in self.received if start <= t < end)})
        return out


def _responsive_ms(port: int) -> float | None:
    """A new connection's CONNECT and PING, answered: milliseconds, or None when the broker did not answer."""
    from loadtest.bench.hostile_attacks import _Raw

    from magnetar.protocol import pulsar_api_pb2 as pb
    from magnetar.protocol.frames import command, encode_command

    start = time.perf_counter()
    try:
        conn = _Raw(port)
        conn.sock.settimeout(5)
        conn.connect()
        conn.send(encode_command(command(pb.BaseCommand.PING, ping=pb.CommandPing())))
        conn.expect(pb.BaseCommand.PONG)
        conn.close()
    except (OSError, RuntimeError):
        return None
    return (time.perf_counter() - start) * 1000


def _broker_up(broker, rss: _RssWatch, port: int) -> dict:
    """Every process of the broker's tree still running, worker 0's /health, and a new connection's CONNECT and
    PING answered by the worker that owns the good client's topic (the one under attack)."""
    from storage.testing.processes import process_alive

    alive = broker.alive and all(process_alive(pid) for pid in rss.pids)
    return {"alive": alive, "healthy": alive and broker.is_healthy(),
            "connect_ping_ms": _responsive_ms(port) if alive else None}


def told(name: str, r: dict) -> str:
    """What the attacker was told, in a line."""
    if "attacker_error" in r:
        return f"attacker failed: {r['attacker_error']}"
    if name == "silent_connections":
        if not r["closed_by_broker"]:
            return f"nothing: {r['still_open_at_end']} of {r['opened']} still open"
        return (f"closed after {r['closed_after_s_min']:.1f}-{r['closed_after_s_max']:.1f} s "
                f"({r['closed_by_broker']} of {r['opened']} opened in {r['open_s']:.1f} s; "
                f"{r['still_open_at_end']} open at the end)")
    parts = [f"{kind} x{count}" for kind, count in sorted(r["replies"].items(), key=lambda kv: -kv[1])]
    if r.get("closed_by_broker_after_s") is not None:
        parts.append(f"closed after {r['closed_by_broker_after_s']:.1f} s")
    if not parts:
        parts.append("no reply")
    first = next(iter(r["messages"].values()), "")
    return "; ".join(parts) + (f' ("{first[:120]}")' if first else "")


def run(quick: bool = False, attacks_to_run: tuple[str, ...] = ATTACK_ORDER, deployment: str = "default") -> dict:
    from loadtest.bench.hostile_attacks import owner_port
    from storage.testing.processes import BrokerProcess

    if deployment not in DEPLOYMENTS:
        raise ValueError(f"deployment {deployment!r}: one of {', '.join(DEPLOYMENTS)}")
    unknown = set(attacks_to_run) - set(ATTACK_ORDER)
    if unknown:
        raise ValueError(f"unknown attacks {', '.join(sorted(unknown))}: the attacks are {', '.join(ATTACK_ORDER)}")

    fds = raise_fd_limit()
    quiet_s, attack_s, settle_s = (1.5, 2.0, 0.5) if quick else (5.0, 10.0, 1.0)
    connection_timeout_s = 1.0 if quick else 10.0  # the broker's default is 10 s
    sizes = {"silent_connections": {"count": 500 if quick else 2000},
             "producer_creates": {"count": 2000 if quick else 10_000}}
    windows = {"silent_connections": connection_timeout_s + (1.5 if quick else 3.0)}
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-hostile-"))
    env = {} if not quick else {"MAGNETAR_BROKER_CONNECTION_TIMEOUT_S": str(connection_timeout_s)}
    broker = BrokerProcess(root / "standalone" / "data", env=env, workers=DEPLOYMENTS[deployment])
    broker.start(timeout_s=90)
    rss = _RssWatch(broker.proc.pid)
    ctx = multiprocessing.get_context("spawn")  # the bench process has the client's C++ threads: never fork it
    attacker = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx)
    good = None
    port = broker.port
    quiet: list[tuple[float, float]] = []
    attacks: dict[str, dict] = {}
    try:
        attacker.submit(time.monotonic).result(120)  # the child's interpreter starts before any window
        good = _GoodClient(broker.service_url, RATE_PER_S)
        from storage.testing.waiting import wait_until

        wait_until(lambda: len(good.published) >= RATE_PER_S, 60, "the good client's first 1,000 receipts")
        port = owner_port(broker.port, good.topic)  # where the good client's lookup took it too
        rss.reset()
        for name in (a for a in ATTACK_ORDER if a in attacks_to_run):
            if not broker.alive:
                attacks[name] = {"skipped": "the broker died earlier"}
                continue
            q0 = time.perf_counter()
            time.sleep(quiet_s)  # the no-attack window: the good client runs alone
            quiet.append((q0, time.perf_counter()))
            quiet_rss = rss.peak_mb()["rss_peak_mb"]
            rss.reset()
            seconds = windows.get(name, attack_s)
            print(f"attack: {name} ({seconds:g} s)", flush=True)
            a0 = time.perf_counter()
            future = attacker.submit(_attack_entry, name, port, good.topic, seconds, sizes.get(name, {}))
            result = future.result(timeout=seconds + 120)
            a1 = time.perf_counter()
            memory = rss.peak_mb()
            attacks[name] = {"window": [a0, a1], "attacker": result, "told": told(name, result),
                             **memory, "rss_before_mb": quiet_rss, **_broker_up(broker, rss, port)}
            time.sleep(settle_s)  # the attacker's tail (its close) is in neither window
            rss.reset()
        if attacks and broker.alive:
            q0 = time.perf_counter()
            time.sleep(quiet_s)  # the last attack's aftermath gets a window too
            quiet.append((q0, time.perf_counter()))
    finally:
        if good is not None:
            good.stop()
        attacker.shutdown(cancel_futures=True)
        rss.stop()
        survived = broker.alive
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)  # the 5 MiB attack alone writes gigabytes
    deployed = {"deployment": deployment, "processes": len(rss.pids), "topic_owner_port": port,
                "worker_0_port": broker.port}
    return _results(good, quiet, attacks, survived, fds, quick, quiet_s, attack_s, connection_timeout_s, sizes,
                    deployed)


def _attack_entry(name: str, port: int, topic: str, seconds: float, kwargs: dict) -> dict:
    from loadtest.bench.hostile_attacks import run_attack

    return run_attack(name, port, topic, seconds, kwargs)


def _results(good, quiet, attacks, survived, fds, quick, quiet_s, attack_s, connection_timeout_s, sizes,
             deployed) -> dict:
    # Each quiet window but the first follows an attack, and whatever that attack left behind (10,000 producers
    # closing, gigabytes of writes still reaching the disk) lands in it. So the reference is the median of the
    # windows' p99s, which one polluted window cannot move, and each window after an attack is charged to that
    # attack as its aftermath: its target holds only if both its own window and the one after it are within 5x.
    windows = [good.window(q0, q1) for q0, q1 in quiet]
    window_p99s = [w["p99_ms"] for w in windows if w.get("p99_ms") is not None]
    quiet_lat = [lat for q0, q1 in quiet for due, lat in good.published if q0 <= due < q1 and lat is not None]
    reference = {**latency_summary_ms(quiet_lat), "pooled_p99_ms": latency_summary_ms(quiet_lat).get("p99_ms"),
                 "p99_ms": statistics.median(window_p99s) if window_p99s else None,
                 "window_p99_ms": [w.get("p99_ms") for w in windows], "windows": len(quiet)}
    reference_p99 = reference["p99_ms"]
    ran = [name for name, a in attacks.items() if "window" in a]
    for name, a in attacks.items():
        if "window" not in a:
            continue
        a["good_client"] = good.window(*a.pop("window"))
        p99 = a["good_client"].get("p99_ms")
        a["p99_ratio"] = p99 / reference_p99 if p99 is not None and reference_p99 else None
        after = ran.index(name) + 1  # quiet window i comes before the i-th attack that ran
        a["after_p99_ms"] = windows[after].get("p99_ms") if after < len(windows) else None
        a["after_ratio"] = (a["after_p99_ms"] / reference_p99
                            if a["after_p99_ms"] is not None and reference_p99 else None)
        a["stayed_up"] = bool(a["alive"] and a["healthy"] and a["connect_ping_ms"] is not None)
        a["targets_met"] = {"stayed_up": a["stayed_up"], "rss_under_1_gib": a["rss_peak_mb"] < RSS_TARGET_MB,
                            "p99_within_5x": a["p99_ratio"] is not None and a["p99_ratio"] <= RATIO_TARGET
                            and (a["after_ratio"] is None or a["after_ratio"] <= RATIO_TARGET)}
    results = {
        "reference": reference, "attacks": attacks, "broker_alive_at_end": survived, "fd_limit": fds,
        "config": {"rate_per_s": RATE_PER_S, "message_bytes": MESSAGE_BYTES, "quiet_window_s": quiet_s,
                   "attack_window_s": attack_s, "connection_timeout_s": connection_timeout_s,
                   "silent_connections": sizes["silent_connections"]["count"],
                   "producer_creates": sizes["producer_creates"]["count"], "quick": quick,
                   "client": "pulsar-client (official)", **deployed},
    }
    _print(results)
    return results


def _print(r: dict) -> None:
    ref = r["reference"]
    rows = [{"attack": "none (reference: median of the quiet windows' p99)", "good_p99_ms": ref.get("p99_ms"),
             "ratio": 1.0, "after_ratio": "", "rss_peak_mb": "", "largest_mb": "", "up": "yes", "told": ""}]
    for name, a in r["attacks"].items():
        if "good_client" not in a:
            rows.append({"attack": name, "told": a.get("skipped", "")})
            continue
        rows.append({"attack": name, "good_p99_ms": a["good_client"].get("p99_ms"), "ratio": a["p99_ratio"],
                     "after_ratio": a["after_ratio"] if a["after_ratio"] is not None else "",
                     "rss_peak_mb": a["rss_peak_mb"],
                     "largest_mb": f"{a['rss_largest_process_peak_mb']:.0f} ({a['rss_largest_process']})",
                     "up": "yes" if a["stayed_up"] else "NO",
                     "told": a["told"][:110]})
    fds = r["fd_limit"]
    config = r["config"]
    print_table(f"hostile clients: the good client at {RATE_PER_S:,} msg/s beside each attack, broker standalone "
                f"({config['deployment']}, {config['processes']} processes; open files {fds['soft_before']} -> "
                f"{fds['soft']}, hard {fds['hard']})", rows,
                ["attack", "good_p99_ms", "ratio", "after_ratio", "rss_peak_mb", "largest_mb", "up", "told"])
    print("quiet windows' p99 (ms), in order: " + ", ".join(_fmt_ms(v) for v in ref.get("window_p99_ms", [])))
    print(f"targets: broker up, RSS (sum over its processes) < {RSS_TARGET_MB} MB, p99 ratio <= {RATIO_TARGET:g}")


def _fmt_ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def median_of(runs: list[dict]) -> dict:
    """Per attack, the median over several runs' results of p99, ratio and RSS peak (for docs/BENCHMARKS.md)."""
    out = {"reference_p99_ms": statistics.median(r["reference"]["p99_ms"] for r in runs)}
    for name in ATTACK_ORDER:
        done = [r["attacks"][name] for r in runs if "good_client" in r["attacks"].get(name, {})]
        if done:
            out[name] = {k: statistics.median(v for v in (f(a) for a in done) if v is not None) for k, f in (
                ("p99_ms", lambda a: a["good_client"].get("p99_ms")), ("ratio", lambda a: a["p99_ratio"]),
                ("rss_peak_mb", lambda a: a["rss_peak_mb"]))}
    return out

