"""The magnetar client with a service URL naming three real brokers (``pulsar://h1:p1,h2:p2,h3:p3``).

The first host is down when the client starts: it must get to the topic through the second. Then the first comes
back and the second, the host in use, is killed: the client's next service connection starts at the host after the
one it used (round-robin), the third, not back at the first; its producer and consumer go on. The order the hosts are tried
in is table-tested in tests/magnetar_client/test_service_hosts.py (magnetar/asyncio/service_hosts.py).
"""

from __future__ import annotations

import magnetar
from storage.testing.waiting import wait_until
from tests.official_client.support import receive_n


def _address(broker) -> str:
    return broker.service_url.removeprefix("pulsar://")


def test_magnetar_client_skips_a_down_first_host_and_goes_round_robin_on_reconnect(start_brokers):
    first, second, third = start_brokers(3)
    first.kill9()  # down: its port refuses
    url = "pulsar://" + ",".join(_address(b) for b in (first, second, third))
    client = magnetar.Client(url, operation_timeout_seconds=30)
    topic = "persistent://public/default/three-hosts"
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=120_000)
        for i in range(5):
            producer.send(f"{i}".encode())
        assert [int(m.data()) for m in receive_n(consumer, 5)] == list(range(5))
        assert client._async.service_hosts.current == _address(second)

        first.start(timeout_s=60)
        in_use = client._async._connections[_address(second)]
        second.kill9()  # the host in use is lost (its sockets close with it)
        wait_until(lambda: in_use.closed, 30, "the client to see its service connection closed")
        # Anything that needs the service URL now opens a new connection: at the next host, though the first is back.
        other = client.create_producer(f"{topic}-after", batching_enabled=False)
        assert client._async.service_hosts.current == _address(third)
        other.send(b"after")
        producer.send(b"5")  # whoever owned the topic, it is served again (the send timeout is 120 s)
        assert [int(m.data()) for m in receive_n(consumer, 1, timeout_s=60)] == [5]
    finally:
        client.close()
