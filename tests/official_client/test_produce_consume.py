"""The official client produces and consumes through `broker standalone`: the basic paths."""

from __future__ import annotations

import threading

import pulsar
import pytest

from tests.official_client.support import assert_nothing_more, payloads, receive_n


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_sync_send_then_consume_in_order(client, topic, batching):
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=batching)
    sent = [f"message-{i}".encode() for i in range(200)]
    ids = [producer.send(m) for m in sent]
    assert len({str(i) for i in ids}) == 200
    assert payloads(receive_n(consumer, 200)) == sent
    assert_nothing_more(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_async_send_completes_every_callback(client, topic, batching):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5)
    results, done = [], threading.Event()

    def callback(res, msg_id):
        results.append(res)
        if len(results) == 1000:
            done.set()

    for i in range(1000):
        producer.send_async(f"m{i}".encode(), callback)
    producer.flush()
    assert done.wait(30)
    assert all(r == pulsar.Result.Ok for r in results)
    assert payloads(receive_n(consumer, 1000)) == [f"m{i}".encode() for i in range(1000)]


@pytest.mark.parametrize("compression", [pulsar.CompressionType.LZ4, pulsar.CompressionType.ZSTD], ids=["lz4", "zstd"])
def test_compressed_batches_round_trip(client, topic, compression):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=True, compression_type=compression)
    sent = [(b"compressible " * 20) + str(i).encode() for i in range(300)]
    for m in sent:
        producer.send_async(m, None)
    producer.flush()
    assert payloads(receive_n(consumer, 300)) == sent


def test_chunked_message_larger_than_the_limit(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = bytes(range(256)) * (12 * 1024 * 1024 // 256)  # 12 MiB: three 5 MiB chunks
    producer.send(big)
    producer.send(b"after")
    got = receive_n(consumer, 2)
    assert got[0].data() == big and got[1].data() == b"after"


def test_properties_keys_and_event_time_survive(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    producer.send(b"x", properties={"a": "1", "b": "two"}, partition_key="k1", event_timestamp=1234567)
    msg = receive_n(consumer, 1)[0]
    assert msg.properties() == {"a": "1", "b": "two"}
    assert msg.partition_key() == "k1"
    assert msg.event_timestamp() == 1234567


def test_oversized_message_without_chunking_is_refused(client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (5 * 1024 * 1024 + 1))
    producer.send(b"still works")


def test_cumulative_ack_then_reconnect_redelivers_only_the_rest(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"{i}".encode())
    got = receive_n(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(got[5])
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    assert payloads(receive_n(consumer, 4)) == [b"6", b"7", b"8", b"9"]
    assert_nothing_more(consumer)


def test_individual_acks_leave_holes_that_are_redelivered(client, topic):
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"{i}".encode())
    got = receive_n(consumer, 10, ack=False)
    for m in got:
        if int(m.data()) % 3 != 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(payloads(receive_n(consumer, 4))) == [b"0", b"3", b"6", b"9"]
    assert_nothing_more(consumer)


def test_unsubscribe_removes_the_subscription(client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "gone")
    producer.send(b"before")
    consumer.unsubscribe()
    producer.send(b"after")
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Latest)
    assert_nothing_more(consumer)  # a new subscription at latest: nothing from before
    producer.send(b"new")
    assert payloads(receive_n(consumer, 1)) == [b"new"]


def test_string_schema_producer_and_consumer(client, topic):
    from pulsar.schema import StringSchema

    consumer = client.subscribe(topic, "typed", schema=StringSchema())
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("héllo")
    msg = receive_n(consumer, 1)[0]
    assert msg.value() == "héllo"
