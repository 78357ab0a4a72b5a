"""RabbitMQ, the durable peer of `bench peers`: a tiny run against a real node (Debian rabbitmq-server).

The node is a child of the test on free loopback ports and goes with it; `make test` installs the package
(the Makefile's `rabbitmq` target).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from loadtest.bench import rabbitmq
from loadtest.bench.peers import WINDOW, rabbitmq_by_size, ratios_by_size
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
