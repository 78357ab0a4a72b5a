"""`tls` suite: the produce bench over pulsar+ssl:// beside plain pulsar://, one broker, one run.

One `broker standalone` serves both listeners (its certificate made for the run by trustme). Each round runs
the client suite's produce loop (loadtest/bench/client.py: batching, 50,000 pending, ``flush()``, the rate
counted from what the broker stored) once plain and once over TLS, for the official client and for
magnetar's sync API, with 100-byte messages and with 16 KiB messages (where the cipher's cost per byte shows).
Plain and TLS alternate within a round, so each pair shares the machine's noise: each figure is the median
over rounds, each ratio (TLS / plain) the median of the rounds' ratios.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from loadtest.bench.client import _produce_sync
from loadtest.bench.report import print_table

ROUNDS = 5
SIZES = {100: 300_000, 16 * 1024: 4_000}  # message bytes -> messages per run
QUICK_SIZES = {100: 20_000, 16 * 1024: 1_000}


class _TlsStandalone:
    """`broker standalone` with pulsar+ssl:// beside pulsar://, on a CA made for this run."""

    def __init__(self, root: Path):
        import trustme

        from storage.testing.processes import BrokerProcess, free_port

        root.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_path, cert, key = root / "ca.pem", root / "broker.pem", root / "broker.key.pem"
        ca.cert_pem.write_to_path(self.ca_path)
        server.cert_chain_pems[0].write_to_path(cert)
        server.private_key_pem.write_to_path(key)
        self.tls_port = free_port()
        config = root / "broker.toml"
        config.write_text(f'tls_port = {self.tls_port}\ntls_certificate_file_path = "{cert}"\n'
                          f'tls_key_file_path = "{key}"\n')
        self.broker = BrokerProcess(root / "data", extra_args=["--config", str(config)])
        self.broker.start(timeout_s=90)

    @property
    def tls_url(self) -> str:
        return f"pulsar+ssl://127.0.0.1:{self.tls_port}"


def run(quick: bool = False, rounds: int | None = None) -> dict:
    import pulsar

    import magnetar

    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-tls-"))
    deployment = _TlsStandalone(root)
    broker = deployment.broker
    quiet = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)}
    clients = {"official": (pulsar, quiet), "magnetar_sync": (magnetar, {})}
    sizes = QUICK_SIZES if quick else SIZES
    rounds = rounds or (1 if quick else ROUNDS)
    runs: dict[str, list[dict]] = {}
    try:
        for _ in range(rounds):
            for size, messages in sizes.items():
                for name, (module, options) in clients.items():
                    plain = _produce_sync(module, broker.service_url, broker.web_url, messages, size, **options)
                    tls = _produce_sync(module, deployment.tls_url, broker.web_url, messages, size,
                                        tls_trust_certs_file_path=str(deployment.ca_path), **options)
                    runs.setdefault(f"{name}_{size}", []).append({"plain": plain["msg_per_s"], "tls": tls["msg_per_s"]})
    finally:
        broker.stop()
    results: dict = {}
    for key, rs in runs.items():
        size = int(key.rsplit("_", 1)[1])
        plain, tls = statistics.median(r["plain"] for r in rs), statistics.median(r["tls"] for r in rs)
        results[key] = {"message_bytes": size, "plain_msg_per_s": plain, "tls_msg_per_s": tls,
                        "plain_mb_per_s": plain * size / 1e6, "tls_mb_per_s": tls * size / 1e6,
                        "ratio": statistics.median(r["tls"] / r["plain"] for r in rs), "runs": rs}
    results["config"] = {"rounds": rounds, "sizes": {str(k): v for k, v in sizes.items()}, "quick": quick,
                         "deployment": "broker standalone, pulsar:// and pulsar+ssl:// on one broker",
                         "tls": "TLS 1.3 through Python's ssl module, an ECDSA P-256 certificate made by trustme"}
    _print(results)
    return results


def _print(r: dict) -> None:
    rows = []
    for key, v in r.items():
        if key == "config":
            continue
        rows.append({"measure": f"{key.rsplit('_', 1)[0]} produce {v['message_bytes']:,} B",
                     "plain msg/s": v["plain_msg_per_s"], "tls msg/s": v["tls_msg_per_s"],
                     "tls MB/s": v["tls_mb_per_s"], "tls/plain": v["ratio"]})
    print_table("produce over pulsar+ssl:// beside pulsar://, same broker, same run", rows,
                ["measure", "plain msg/s", "tls msg/s", "tls MB/s", "tls/plain"])
