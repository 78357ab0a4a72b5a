"""`peers` suite: Magnetar beside peer systems and the machine's own limits, all in one run.

* **NATS JetStream** (Debian `nats-server` 2.9, file storage) driven by `nats-py`: publishes with a sliding
  window of 512 in flight, then a pull consumer fetching and acking in batches.
* **RabbitMQ** (Debian `rabbitmq-server` 3.10, loadtest/bench/rabbitmq.py): a stream over the stream protocol
  (rstream) and a quorum queue over AMQP with publisher confirms (aio-pika), the same window of 512.
  The quorum queue fsyncs before it confirms; the stream does not (it leans on replication).
* **Magnetar** (`broker standalone --single-process`, E2/Qw2/Qa2) with the official `pulsar-client` and with `magnetar`,
  same message size, batching on, under the peers' window: at most 512 messages unconfirmed
  (``max_pending_messages``, the producer waiting for room), in batches of at most 64 messages (the stream
  driver's frame). Rows: ``pulsar_client`` and ``magnetar`` with the journal fsync on (the default, the
  headline); ``pulsar_client_no_fsync``, a second standalone with ``journalSyncData=false``, which makes the
  RabbitMQ stream's promise (confirmed once in the page cache) and so compares like with like; and
  ``pulsar_client_deep``, fsync on with the other suites' deep window (50,000 pending, batches of 1,000).
* **The machine**: the disk's fdatasync rate for 512-byte writes and loopback TCP bandwidth.

JetStream 2.9 has no per-message fsync option (it syncs every 2 minutes by default), so the comparison
favours NATS on durability; the ratio is printed all the same. At every size the result carries Magnetar's
ratio to each peer (``ratios_by_size``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from loadtest.bench.broker import _Deployment, produce as official_produce
from loadtest.bench.client import magnetar_produce_consume
from loadtest.bench import rabbitmq
from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import print_table

MESSAGE_BYTES = 100
WINDOW = 512
QW = 2  # write quorum of `broker standalone` (E2/Qw2/Qa2)
DEEP_WINDOW, DEEP_BATCH = 50_000, 1000  # the broker and client suites' producer: not the peers' window
# Issue 24's targets: Magnetar (pulsar-client) over the RabbitMQ stream at these sizes, in the same run.
STREAM_TARGETS = {"100": 3.0, "1024": 3.0, "65536": 1.0}
PULSAR_CLIENT_ROWS = ("pulsar_client", "pulsar_client_deep", "pulsar_client_no_fsync")
# Which rows fsync before they confirm (the report prints it beside each).
FSYNCS = {"pulsar_client": True, "magnetar": True, "pulsar_client_deep": True, "pulsar_client_no_fsync": False,
          "rabbitmq_quorum": True, "rabbitmq_stream": False, "nats_jetstream": False}



def loopback_tcp_mb_per_s(seconds: float) -> float:
    """One sender thread, one receiver, 64 KiB writes over 127.0.0.1."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = [0]

    def drain():
        conn, _ = server.accept()
        while data := conn.recv(1 << 20):
            received[0] += len(data)
        conn.close()

    reader = threading.Thread(target=drain)
    reader.start()
    sender = socket.create_connection(server.getsockname())
    chunk = b"x" * 65536
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        sender.sendall(chunk)
    sender.close()
    reader.join()
    elapsed = time.perf_counter() - start
    server.close()
    return received[0] / elapsed / 1e6


async def _nats(url: str, messages: int, body_bytes: int = MESSAGE_BYTES) -> dict:
    import nats

    nc = await nats.connect(url)
    stream = f"BENCH{body_bytes}"
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[stream.lower()], storage="file")
        body = b"x" * body_bytes
        left = [messages]

        async def publisher() -> None:
            # WINDOW of these keep WINDOW publishes in flight: a sliding window, as the other drivers keep,
            # not rounds of WINDOW that each wait for the slowest acknowledgement.
            while left[0] > 0:
                left[0] -= 1
                await js.publish(stream.lower(), body)

        start = time.perf_counter()
        await asyncio.gather(*(publisher() for _ in range(min(WINDOW, messages))))
        produced = time.perf_counter() - start
        sub = await js.pull_subscribe(stream.lower(), durable="bench")
        got = 0
        start = time.perf_counter()
        while got < messages:
            batch = await sub.fetch(min(WINDOW, messages - got), timeout=10)
            await asyncio.gather(*(m.ack() for m in batch))
            got += len(batch)
        consumed = time.perf_counter() - start
        return {"messages": messages, "message_bytes": body_bytes, "produce_msg_per_s": messages / produced,
                "produce_mb_per_s": messages * body_bytes / produced / 1e6, "consume_msg_per_s": messages / consumed}
    finally:
        await nc.close()


def _nats_server(root: Path):
    from storage.testing.processes import free_port
    from storage.testing.waiting import wait_until

    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    port = free_port()
    proc = subprocess.Popen([binary, "-js", "-sd", str(root / "nats"), "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_until(listening, 20, "nats-server to listen")
    return proc, f"nats://127.0.0.1:{port}"


SIZES = (100, 1024, 16 * 1024, 64 * 1024)
SWEEP_BYTES = 200_000_000  # per system and size above 100 B: the message count is this budget / size


def _count(size: int, n: int, quick: bool) -> int:
    return n if size == MESSAGE_BYTES else max(200, min(n, (SWEEP_BYTES // 20 if quick else SWEEP_BYTES) // size))


PEERS = ("nats_jetstream", "rabbitmq_stream", "rabbitmq_quorum")
MAGNETAR = ("pulsar_client", "magnetar", "pulsar_client_no_fsync", "pulsar_client_deep")


def rabbitmq_by_size(root: Path, counts: dict[int, int]) -> dict[str, dict[str, dict]]:
    """Both RabbitMQ kinds at each size (``counts``: size -> messages) against one throwaway node."""
    import uvloop

    sweep: dict[str, dict[str, dict]] = {"rabbitmq_stream": {}, "rabbitmq_quorum": {}}
    with rabbitmq.RabbitMQServer(root / "rabbitmq") as server:
        for size, count in counts.items():
            os.sync()
            sweep["rabbitmq_stream"][str(size)] = uvloop.run(
                rabbitmq.stream_produce(server.stream_port, count, size, WINDOW))
            os.sync()
            sweep["rabbitmq_quorum"][str(size)] = uvloop.run(
                rabbitmq.quorum_queue_produce(server.amqp_url, count, size, WINDOW))
    return sweep


def ratios_by_size(sweep: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """Magnetar's produce rate over each peer's, per size: {size: {"<magnetar driver>_to_<peer>": ratio}}.

    Rates in bytes and in messages give the same ratio (same size, same count), so one is kept.
    """
    sizes = next(iter(sweep.values())).keys()
    return {size: {f"{m}_to_{p}": sweep[m][size]["produce_mb_per_s"] / sweep[p][size]["produce_mb_per_s"]
                   for m in MAGNETAR if m in sweep for p in PEERS if p in sweep}
            for size in sizes}


def what_the_stream_targets_need(sweep: dict[str, dict[str, dict]], disk_64k_mb_per_s: float,
                                  cores: int) -> dict[str, dict]:
    """What meeting each stream target would take, from this run's own figures.

    The official client's CPU per message is the least its process spent per message in any pulsar-client row of
    the size. Times the target rate, it gives the cores the client alone would need, before the broker and its
    bookies get any. ``vs_disk`` is the target's bytes per second over the disk's fdatasync'd 64 KiB bandwidth:
    above 1, not even a single copy of every byte can be fsync'd in time.
    """
    needs = {}
    for size, ratio in STREAM_TARGETS.items():
        if size not in sweep.get("rabbitmq_stream", {}):
            continue
        stream = sweep["rabbitmq_stream"][size]
        cpu = min((sweep[m][size]["client_cpu_us_per_msg"] for m in PULSAR_CLIENT_ROWS
                   if size in sweep.get(m, {}) and "client_cpu_us_per_msg" in sweep[m][size]), default=None)
        msg_per_s = ratio * stream["produce_msg_per_s"]
        needs[size] = {"target": ratio, "msg_per_s": msg_per_s, "mb_per_s": ratio * stream["produce_mb_per_s"],
                       "client_cpu_us_per_msg": cpu, "cores": cores,
                       "client_cores": None if cpu is None else msg_per_s * cpu / 1e6,
                       "vs_disk": ratio * stream["produce_mb_per_s"] / disk_64k_mb_per_s}
    return needs


def run(quick: bool = False) -> dict:
    import uvloop

    n = 20_000 if quick else 200_000
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-peers-"))
    results: dict = {
        "disk_512b": fsync_bandwidth(root, 512, 1.0 if quick else 3.0),
        "disk_64k": fsync_bandwidth(root, 64 * 1024, 1.0 if quick else 3.0),
        "loopback_tcp_mb_per_s": loopback_tcp_mb_per_s(1.0 if quick else 3.0),
    }
    sweep: dict[str, dict[str, dict]] = {"nats_jetstream": {}, **{m: {} for m in MAGNETAR}}
    sweep.update(rabbitmq_by_size(root, {size: _count(size, n, quick) for size in SIZES}))
    proc, url = _nats_server(root)
    try:
        for size in SIZES:
            os.sync()  # each run starts with no dirty pages left by the previous one (one disk serves all)
            sweep["nats_jetstream"][str(size)] = uvloop.run(_nats(url, _count(size, n, quick), size))
    finally:
        proc.terminate()
        proc.wait(10)
    batch = rabbitmq.STREAM_BATCH
    deployment = _Deployment(root / "fsync", cluster=False)
    try:
        url = deployment.broker.service_url
        for size in SIZES:
            count = _count(size, n, quick)
            os.sync()
            sweep["pulsar_client"][str(size)] = official_produce(url, count, size, window=WINDOW, batch_messages=batch)
            os.sync()
            sweep["magnetar"][str(size)] = uvloop.run(magnetar_produce_consume(url, count, size, window=WINDOW,
                                                                               batch_messages=batch))
            os.sync()
            sweep["pulsar_client_deep"][str(size)] = official_produce(url, count, size, window=DEEP_WINDOW,
                                                                      batch_messages=DEEP_BATCH)
    finally:
        deployment.stop()
    deployment = _Deployment(root / "no-fsync", cluster=False, env={"MAGNETAR_BROKER_JOURNAL_SYNC_DATA": "false"})
    try:
        for size in SIZES:
            os.sync()
            sweep["pulsar_client_no_fsync"][str(size)] = official_produce(
                deployment.broker.service_url, _count(size, n, quick), size, window=WINDOW, batch_messages=batch)
    finally:
        deployment.stop()
    # The disk again at the end: on a shared host it can change several-fold within one run, and every
    # figure above sits between the two measurements.
    results["disk_512b_end"] = fsync_bandwidth(root, 512, 1.0 if quick else 3.0)
    results["disk_64k_end"] = fsync_bandwidth(root, 64 * 1024, 1.0 if quick else 3.0)
    for system in sweep.values():  # one name for the produce rate across the three drivers
        for r in system.values():
            r.setdefault("produce_msg_per_s", r.get("msg_per_s"))
            r.setdefault("produce_mb_per_s", r.get("mb_per_s"))
    results["by_size"] = sweep
    results["ratios_by_size"] = ratios_by_size(sweep)
    results["stream_targets"] = what_the_stream_targets_need(sweep, results["disk_64k"]["mb_per_s"], os.cpu_count() or 1)
    small = str(MESSAGE_BYTES)
    results["nats_jetstream"], results["pulsar_client"], results["magnetar"] = (
        sweep["nats_jetstream"][small], sweep["pulsar_client"][small], sweep["magnetar"][small])
    nats_rate = results["nats_jetstream"]["produce_msg_per_s"]
    results["ratio_pulsar_client_to_nats"] = results["pulsar_client"]["msg_per_s"] / nats_rate
    results["ratio_magnetar_to_nats"] = results["magnetar"]["produce_msg_per_s"] / nats_rate
    # The 64 KiB target. Each of the Qw = 2 bookies on this one disk writes every byte twice, to its journal
    # and to its entry log (as the ledger suite counts): the physical limit is disk bandwidth / (Qw x 2).
    # Disk bandwidth / Qw, as if only the journals wrote, is reported beside it as the stricter view.
    big = str(64 * 1024)
    results["physical_limit_64k_mb_per_s"] = results["disk_64k"]["mb_per_s"] / (QW * 2)
    results["journal_only_limit_64k_mb_per_s"] = results["disk_64k"]["mb_per_s"] / QW
    for name, limit in (("ratio_64k_to_physical", "physical_limit_64k_mb_per_s"),
                        ("ratio_64k_to_journal_only_limit", "journal_only_limit_64k_mb_per_s")):
        results[name] = {system: sweep[system][big]["produce_mb_per_s"] / results[limit]
                         for system in ("pulsar_client", "magnetar", "pulsar_client_deep")}
    results["config"] = {"messages": n, "message_bytes": MESSAGE_BYTES, "sizes": list(SIZES),
                         "sweep_bytes": SWEEP_BYTES // 20 if quick else SWEEP_BYTES, "nats_window": WINDOW,
                         "window": WINDOW, "rabbitmq_stream_batch": rabbitmq.STREAM_BATCH,
                         "quick": quick, "magnetar": "broker standalone, E2/Qw2/Qa2, batching on",
                         "magnetar_batch": batch, "deep_window": DEEP_WINDOW, "deep_batch": DEEP_BATCH,
                         "fsyncs": FSYNCS}
    _print(results)
    return results


def _print(results: dict) -> None:
    nats_rate = results["nats_jetstream"]["produce_msg_per_s"]
    print_table("peers: 100-byte messages, one run", [
        {"system": "NATS JetStream (file, no per-message fsync)", "produce_msg_s": nats_rate,
         "consume_msg_s": results["nats_jetstream"]["consume_msg_per_s"], "vs_nats": 1.0},
        {"system": "Magnetar + pulsar-client", "produce_msg_s": results["pulsar_client"]["msg_per_s"],
         "consume_msg_s": "", "vs_nats": results["ratio_pulsar_client_to_nats"]},
        {"system": "Magnetar + magnetar", "produce_msg_s": results["magnetar"]["produce_msg_per_s"],
         "consume_msg_s": results["magnetar"]["consume_msg_per_s"], "vs_nats": results["ratio_magnetar_to_nats"]},
        {"system": f"disk fdatasync 512 B: {results['disk_512b']['fsyncs_per_s']:,.0f}/s; "
                   f"loopback TCP: {results['loopback_tcp_mb_per_s']:,.0f} MB/s", "produce_msg_s": "", "consume_msg_s": "",
         "vs_nats": ""},
    ], ["system", "produce_msg_s", "consume_msg_s", "vs_nats"])
    columns = ("nats_jetstream", "rabbitmq_stream", "rabbitmq_quorum", *MAGNETAR)
    rows = [{"size_bytes": size, **{system: results["by_size"][system][str(size)]["produce_mb_per_s"]
                                    for system in columns}}
            for size in results["config"]["sizes"]]
    rows.append({"size_bytes": "64 KiB limit", "magnetar": results["physical_limit_64k_mb_per_s"],
                 "pulsar_client": f"disk 64 KiB fdatasync {results['disk_64k']['mb_per_s']:,.0f} MB/s / (Qw 2 x 2)"})
    print_table("produce MB/s by message size", rows, ["size_bytes", *columns])
    for m in ("pulsar_client", "pulsar_client_no_fsync"):
        print_table(f"Magnetar ({m}) / peer, produce, by size", [
            {"size_bytes": size, **{p: results["ratios_by_size"][str(size)][f"{m}_to_{p}"] for p in PEERS}}
            for size in results["config"]["sizes"]], ["size_bytes", *PEERS])
    print("fsync before confirming: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in FSYNCS.items()))
