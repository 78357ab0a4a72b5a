"""Faults with the official client attached: a broker restart, a bookie killed during production."""

from __future__ import annotations

import json
import threading
import urllib.request

import pulsar

from storage.testing.processes import BrokerProcess
from storage.testing.waiting import wait_until
from tests.official_client.support import payloads, receive_n


def test_standalone_restart_keeps_every_acknowledged_message(start_standalone):
    broker = start_standalone()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    topic = "persistent://public/default/restart"
    try:
        consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60000)
        for i in range(300):
            producer.send_async(f"{i}".encode(), None)
        producer.flush()
        first = receive_n(consumer, 100)  # 100 acked before the restart, 200 not yet delivered or acked
        # Acks travel in groups (the client's ack grouping); wait until the broker has all 100.
        wait_until(lambda: _backlog(broker, topic, "durable") == 200, 20, "the broker to apply 100 acks")
        broker.restart(timeout_s=60)
        for i in range(300, 400):
            producer.send(f"{i}".encode())  # the producer reconnects by itself
        rest = receive_n(consumer, 300, timeout_s=60)
        got = [int(m.data()) for m in first + rest]
        assert sorted(got) == list(range(400)), "every acknowledged message arrives"
        assert len(set(got)) == len(got), "nothing acknowledged before the restart comes back"
    finally:
        client.close()


def _backlog(broker, topic, sub) -> int:
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/admin/v2/persistent/{name}/stats", timeout=10) as resp:
        return json.loads(resp.read())["subscriptions"][sub]["msgBacklog"]


def test_standalone_restart_restores_subscription_position(start_standalone):
    broker = start_standalone()
    topic = "persistent://public/default/position"
    client = pulsar.Client(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "pos")
    for i in range(10):
        producer.send(f"{i}".encode())
    receive_n(consumer, 4)
    client.close()
    broker.restart(timeout_s=60)
    client = pulsar.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "pos")
        assert payloads(receive_n(consumer, 6)) == [f"{i}".encode() for i in range(4, 10)]
    finally:
        client.close()


def test_bookie_killed_during_production_is_replaced(start_bookies, zookeeper_server, tmp_path):
    cluster = start_bookies(3)
    broker = BrokerProcess(tmp_path / "broker", metadata_url=cluster.metadata_url)
    broker.start(timeout_s=60)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    topic = "persistent://public/default/bookie-loss"
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60000)
        acked: list[int] = []
        stop = threading.Event()

        def produce():
            i = 0
            while not stop.is_set():
                producer.send(f"{i}".encode())
                acked.append(i)
                i += 1

        worker = threading.Thread(target=produce)
        worker.start()
        wait_until(lambda: len(acked) >= 200, 20, "200 acknowledged sends")
        cluster.bookies[0].kill9()
        mark = len(acked)
        wait_until(lambda: len(acked) >= mark + 300, 30, "300 more acknowledged sends after the bookie died")
        stop.set()
        worker.join(30)
        got = [int(m.data()) for m in receive_n(consumer, len(acked), timeout_s=60)]
        assert got == acked
    finally:
        client.close()
        broker.stop()


def test_ctrl_c_shuts_the_standalone_down_cleanly(start_standalone):
    import signal

    broker = start_standalone()
    client = pulsar.Client(broker.service_url)
    client.create_producer("persistent://public/default/ctrl-c").send(b"x")
    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(30) == 0
    assert "shutting down" in broker.log_tail()
    client.close()
