"""Message deduplication (per namespace, survives a restart) and batch-index acknowledgements."""

from __future__ import annotations


import pulsar

from tests.official_client.support import admin_call, assert_nothing_more, payloads, receive_n


def _dedup_namespace(broker, ns):
    admin_call(broker, "PUT", f"/admin/v2/namespaces/public/{ns}")
    admin_call(broker, "POST", f"/admin/v2/namespaces/public/{ns}/deduplication", True)


def test_resent_sequence_ids_are_stored_once_even_after_a_restart(start_standalone):
    broker = start_standalone()
    _dedup_namespace(broker, "dedup")
    topic = "persistent://public/dedup/orders"
    client = pulsar.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="app-1")
        for seq in range(5):
            producer.send(f"m{seq}".encode(), sequence_id=seq)
        producer.send(b"m3-again", sequence_id=3)  # a retry of something already stored
        producer.close()
        assert payloads(receive_n(consumer, 5)) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert_nothing_more(consumer)
    finally:
        client.close()
    broker.restart(timeout_s=60)
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(topic, producer_name="app-1")
        assert producer.last_sequence_id() == 4  # the broker remembers across the restart
        producer.send(b"m4-again", sequence_id=4)
        producer.send(b"m5", sequence_id=5)
        consumer = client.subscribe(topic, "s")
        assert payloads(receive_n(consumer, 1)) == [b"m5"]
        assert_nothing_more(consumer)
    finally:
        client.close()


def test_without_dedup_a_resend_is_stored_twice(client, topic):
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name=f"p-{topic[-8:]}")
    producer.send(b"a", sequence_id=1)
    producer.send(b"a", sequence_id=1)
    assert payloads(receive_n(consumer, 2)) == [b"a", b"a"]


def test_batch_index_acks_redeliver_only_the_unacked_messages_of_a_batch(client, topic):
    consumer = client.subscribe(topic, "bi", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(6):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    got = receive_n(consumer, 6, ack=False)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) == 1, "one batch entry"
    for m in got:
        if int(m.data()) % 2 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "bi", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    assert sorted(payloads(receive_n(consumer, 3))) == [b"1", b"3", b"5"]
    assert_nothing_more(consumer)
