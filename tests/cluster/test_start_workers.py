"""`broker start --workers 2` (broker/workers.py without a data directory): two brokers of a ZooKeeper cluster from
one command, reached through worker 0's address, a killed worker's bundles taken over, and SIGTERM leaving none."""

from __future__ import annotations

import os
import signal

import pulsar

from storage.testing.processes import BrokerProcess, process_alive, standalone_children
from storage.testing.waiting import wait_until
from tests.cluster.support import lookup


def test_start_with_workers_runs_a_broker_per_worker_on_the_cluster(start_bookies, tmp_path):
    bookies = start_bookies(3)
    broker = BrokerProcess(tmp_path / "workers", metadata_url=bookies.metadata_url, workers=2,
                           env={"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"})
    try:
        broker.start(timeout_s=120)
        children = standalone_children(broker.proc.pid)
        assert sorted(children) == ["worker-0", "worker-1"]  # no bookies: the cluster has its own
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        owners = {}
        for i in range(64):
            topic = f"persistent://public/default/start-workers-{i}"
            client.create_producer(topic).close()
            owners.setdefault(lookup(broker, topic), topic)
            if len(owners) == 2:
                break
        assert len(owners) == 2 and broker.service_url in owners
        victim = next(t for url, t in owners.items() if url != broker.service_url)
        producer = client.create_producer(victim)
        producer.send(b"before")
        os.kill(children["worker-1"], signal.SIGKILL)
        producer.send(b"after")  # ZooKeeper ends the dead worker's session; a live broker takes the bundle
        reader = client.create_reader(victim, pulsar.MessageId.earliest)
        assert [reader.read_next(30_000).data() for _ in range(2)] == [b"before", b"after"]
        client.close()
        wait_until(lambda: "worker-1 (pid" in broker.log_since_start(), 30, "the supervisor to report the death")
        wait_until(lambda: standalone_children(broker.proc.pid).get("worker-1", children["worker-1"]) !=
                   children["worker-1"], 60, "the worker to be restarted")
        children.update(standalone_children(broker.proc.pid))
    finally:
        broker.stop(timeout_s=60)
    assert not [name for name, pid in children.items() if process_alive(pid)]  # the restarted worker-1 included
