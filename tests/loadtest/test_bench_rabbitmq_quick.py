"""RabbitMQ, the durable peer of `bench peers`: a tiny run against a real node (Debian rabbitmq-server).

The node is a child of the test on free loopback ports and goes with it; `make test` installs the package
(the Makefile's `rabbitmq` target).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from loadtest.bench import rabbitmq
from loadtest.bench.peers import WINDOW, rabbitmq_by_size, ratios_by_size, what_the_stream_targets_need
from storage.testing.processes import process_tree

SIZES = {100: 2_000, 65536: 200}


def _erlang_processes_of(root) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(root) in line]


def test_a_tiny_peers_run_against_real_rabbitmq_gives_both_kinds_at_each_size(tmp_path):
    sweep = json.loads(json.dumps(rabbitmq_by_size(tmp_path, SIZES)))  # what the JSON output holds
    assert set(sweep) == {"rabbitmq_stream", "rabbitmq_quorum"}
    for kind, by_size in sweep.items():
        assert [int(s) for s in by_size] == list(SIZES)
        for size, r in by_size.items():
            assert r["messages"] == SIZES[int(size)] and r["message_bytes"] == int(size)
            assert r["window"] == WINDOW
            assert r["produce_msg_per_s"] > 0
            assert r["produce_mb_per_s"] == pytest.approx(r["produce_msg_per_s"] * int(size) / 1e6)
    for size, r in sweep["rabbitmq_quorum"].items():
        assert r["stored"] == SIZES[int(size)]  # every confirmed publish is in the queue
    assert not _erlang_processes_of(tmp_path / "rabbitmq"), "the node or its epmd outlived the run"


def test_the_node_and_its_epmd_listen_on_loopback_only(tmp_path):
    with rabbitmq.RabbitMQServer(tmp_path) as server:
        pids = {*process_tree(server._server.pid), server._epmd.pid}
        listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
        ours = [line.split()[3] for line in listening if any(f"pid={pid}," in line for pid in pids)]
        ports = {int(address.rsplit(":", 1)[1]) for address in ours}
        assert {server.amqp_port, server.stream_port, server.dist_port, server.epmd_port} <= ports, listening
        assert all(address.startswith(("127.0.0.1:", "[::1]:")) for address in ours), ours


@pytest.mark.parametrize("rates, expected", [
    ({"pulsar_client": 300.0, "magnetar": 150.0, "rabbitmq_stream": 100.0, "rabbitmq_quorum": 50.0, "nats_jetstream": 600.0},
     {"pulsar_client_to_rabbitmq_stream": 3.0, "pulsar_client_to_rabbitmq_quorum": 6.0,
      "pulsar_client_to_nats_jetstream": 0.5, "magnetar_to_rabbitmq_stream": 1.5,
      "magnetar_to_rabbitmq_quorum": 3.0, "magnetar_to_nats_jetstream": 0.25}),
    ({"pulsar_client": 10.0, "rabbitmq_quorum": 40.0}, {"pulsar_client_to_rabbitmq_quorum": 0.25}),
])
def test_ratios_by_size_divide_magnetar_by_each_peer(rates, expected):
    sweep = {system: {"100": {"produce_mb_per_s": rate}, "65536": {"produce_mb_per_s": rate * 2}}
             for system, rate in rates.items()}
    assert ratios_by_size(sweep) == {"100": expected, "65536": expected}


def test_what_the_stream_targets_need_uses_the_cheapest_client_row_and_the_disk():
    def row(msg_per_s, size, cpu=None):
        return {"produce_msg_per_s": msg_per_s, "produce_mb_per_s": msg_per_s * size / 1e6,
                **({"client_cpu_us_per_msg": cpu} if cpu is not None else {})}

    sweep = {"rabbitmq_stream": {"100": row(100_000, 100), "1024": row(50_000, 1024), "65536": row(3_000, 65536)},
             "pulsar_client": {"100": row(1, 100, 5.0), "1024": row(1, 1024, 6.0), "65536": row(1, 65536, 80.0)},
             "pulsar_client_deep": {"100": row(1, 100, 4.0), "1024": row(1, 1024, 7.0), "65536": row(1, 65536, 60.0)},
             "pulsar_client_no_fsync": {"100": row(1, 100, 4.5)}}
    needs = what_the_stream_targets_need(sweep, disk_64k_mb_per_s=100.0, cores=1)
    assert set(needs) == {"100", "1024", "65536"}
    small = needs["100"]
    assert (small["target"], small["msg_per_s"], small["client_cpu_us_per_msg"]) == (3.0, 300_000, 4.0)
    assert small["client_cores"] == pytest.approx(1.2) and small["vs_disk"] == pytest.approx(0.3)
    assert needs["1024"]["client_cpu_us_per_msg"] == 6.0 and needs["1024"]["vs_disk"] == pytest.approx(1.536)
    big = needs["65536"]
    assert big["target"] == 1.0 and big["mb_per_s"] == pytest.approx(196.608) and big["vs_disk"] == pytest.approx(1.96608)
    assert big["client_cores"] == pytest.approx(3_000 * 60.0 / 1e6)
    del sweep["rabbitmq_stream"]["1024"]  # a size the stream did not run has no target row
    assert set(what_the_stream_targets_need(sweep, 100.0, 1)) == {"100", "65536"}
