"""`peers` suite: Magnetar beside a peer system and the machine's own limits, all in one run.

* **NATS JetStream** (Debian `nats-server` 2.9, file storage) driven by `nats-py`: 100-byte publishes with a
  window of 512 in flight, then a pull consumer fetching and acking in batches.
* **Magnetar** (`broker standalone`, E2/Qw2/Qa2, fsync on) with the official `pulsar-client` and with
  `magnetar`, same message size, batching on.
* **The machine**: the disk's fdatasync rate for 512-byte writes and loopback TCP bandwidth.

JetStream 2.9 has no per-message fsync option (it syncs every 2 minutes by default), so the comparison
favours NATS on durability; the ratio is printed all the same.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from loadtest.bench.broker import _Deployment, produce as official_produce
from loadtest.bench.client import _magnetar
from loadtest.bench.disk import fsync_bandwidth
from loadtest.bench.report import print_table

MESSAGE_BYTES = 100
WINDOW = 512


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


async def _nats(url: str, messages: int) -> dict:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BENCH", subjects=["bench"], storage="file")
        body = b"x" * MESSAGE_BYTES
        start = time.perf_counter()
        for first in range(0, messages, WINDOW):
            await asyncio.gather(*(js.publish("bench", body) for _ in range(min(WINDOW, messages - first))))
        produced = time.perf_counter() - start
        sub = await js.pull_subscribe("bench", durable="bench")
        got = 0
        start = time.perf_counter()
        while got < messages:
            batch = await sub.fetch(min(WINDOW, messages - got), timeout=10)
            await asyncio.gather(*(m.ack() for m in batch))
            got += len(batch)
        consumed = time.perf_counter() - start
        return {"messages": messages, "produce_msg_per_s": messages / produced, "consume_msg_per_s": messages / consumed}
    finally:
        await nc.close()


def _nats_server(root: Path):
    from tests.harness.processes import free_port, wait_until

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


def run(quick: bool = False) -> dict:
    import uvloop

    n = 20_000 if quick else 200_000
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-peers-"))
    results: dict = {
        "disk_512b": fsync_bandwidth(root, 512, 1.0 if quick else 3.0),
        "loopback_tcp_mb_per_s": loopback_tcp_mb_per_s(1.0 if quick else 3.0),
    }
    proc, url = _nats_server(root)
    try:
        results["nats_jetstream"] = uvloop.run(_nats(url, n))
    finally:
        proc.terminate()
        proc.wait(10)
    deployment = _Deployment(root, cluster=False)
    try:
        results["pulsar_client"] = official_produce(deployment.broker.service_url, n)
        results["magnetar"] = uvloop.run(_magnetar(deployment.broker.service_url, n))
    finally:
        deployment.stop()
    nats_rate = results["nats_jetstream"]["produce_msg_per_s"]
    results["ratio_pulsar_client_to_nats"] = results["pulsar_client"]["msg_per_s"] / nats_rate
    results["ratio_magnetar_to_nats"] = results["magnetar"]["produce_msg_per_s"] / nats_rate
    results["config"] = {"messages": n, "message_bytes": MESSAGE_BYTES, "nats_window": WINDOW, "quick": quick,
                         "magnetar": "broker standalone, E2/Qw2/Qa2, fsync on, batching on"}
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
    return results
