"""Catch-up reads under a tight broker-wide bound on dispatch reads in flight: every subscription still gets its
whole backlog, in order (a read that does not fit waits for the others to be handed out, never for good)."""

from __future__ import annotations

import concurrent.futures

import pulsar

from tests.official_client.support import receive_n

TOPICS = 4
MESSAGES = 30
SIZE = 200 * 1024  # 30 x 200 KiB per topic: each catch-up read alone would take most of the 1 MB bound


def test_concurrent_catch_up_reads_under_a_one_megabyte_bound(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_MANAGED_LEDGER_MAX_READS_IN_FLIGHT_SIZE_MB": "1"})
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        topics = [f"persistent://public/default/reads-in-flight-{i}" for i in range(TOPICS)]
        for t in topics:  # the subscriptions exist (and keep the backlog) before anything is produced
            client.subscribe(t, "catch-up").close()
        for t in topics:
            producer = client.create_producer(t, batching_enabled=False)
            for i in range(MESSAGES):
                producer.send_async(i.to_bytes(4, "big") + b"x" * SIZE, None)
            producer.flush()
            producer.close()
        consumers = [client.subscribe(t, "catch-up", receiver_queue_size=100) for t in topics]
        with concurrent.futures.ThreadPoolExecutor(TOPICS) as pool:
            got = list(pool.map(lambda c: [int.from_bytes(m.data()[:4], "big") for m in receive_n(c, MESSAGES, 60)],
                                consumers))
        assert got == [list(range(MESSAGES))] * TOPICS
    finally:
        client.close()
