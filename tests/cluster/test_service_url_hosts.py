"""The magnetar client with a service URL naming two real brokers (``pulsar://h1:p1,h2:p2``).

The first host is down when the client starts: it must get to the topic through the second. Then the first comes
back and the second is killed: the client's reconnect starts at the host after the one it used (round-robin), so
its producer and consumer go on through the first host. The order the hosts are tried in is table-tested in
tests/magnetar_client/test_service_hosts.py (magnetar/asyncio/service_hosts.py).
"""

from __future__ import annotations

import magnetar
from tests.official_client.support import receive_n


def _address(broker) -> str:
    return broker.service_url.removeprefix("pulsar://")


def test_magnetar_client_skips_a_down_first_host_and_goes_round_robin_on_reconnect(start_brokers):
    first, second = start_brokers(2)
    first.kill9()  # down: its port refuses
    client = magnetar.Client(f"pulsar://{_address(first)},{_address(second)}", operation_timeout_seconds=30)
    topic = "persistent://public/default/two-hosts"
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=120_000)
        for i in range(5):
            producer.send(f"{i}".encode())
        assert [int(m.data()) for m in receive_n(consumer, 5)] == list(range(5))
        assert client._async.service_hosts.current == _address(second)

        first.start(timeout_s=60)
        second.kill9()  # the host in use is lost: the reconnect starts at the next one, the first
        producer.send(b"5")  # waits through the reconnect (the send timeout is 120 s)
        assert client._async.service_hosts.current == _address(first)
        assert [int(m.data()) for m in receive_n(consumer, 1, timeout_s=60)] == [5]
    finally:
        client.close()
