"""The `magnetar` client against `broker standalone`: the official client's scenarios, through our own client."""

from __future__ import annotations

import collections
import importlib
import json
import threading
import time
import urllib.request

import pulsar
import pytest

import magnetar
from storage.testing.waiting import wait_until
from tests.official_client.support import assert_nothing_more, payloads, receive_n

TOO_BIG = 5 * 1024 * 1024 + 1  # one byte over the broker's default maximum message size


@pytest.fixture
def mclient(standalone):
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    yield c
    c.close()


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_send_and_receive_in_order(mclient, topic, batching):
    consumer = mclient.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer(topic, batching_enabled=batching)
    sent = [f"m{i}".encode() for i in range(50)]
    ids = [producer.send(m, properties={"n": str(i)}, partition_key=f"k{i % 3}") for i, m in enumerate(sent)]
    assert ids == sorted(ids)
    got = receive_n(consumer, 50)
    assert payloads(got) == sent
    assert got[7].properties() == {"n": "7"} and got[7].partition_key() == "k1"
    assert_nothing_more(consumer)


def test_send_async_callbacks_and_flush(mclient, topic):
    consumer = mclient.subscribe(topic, "s")
    producer = mclient.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    results = []
    for i in range(500):
        producer.send_async(f"{i}".encode(), lambda res, mid, i=i: results.append((i, res, mid)))
    producer.flush()  # magnetar's flush returns after every callback of what it waited for has run
    assert [i for i, _, _ in results] == list(range(500))
    assert all(res == magnetar.Result.Ok and mid is not None for _, res, mid in results)
    assert payloads(receive_n(consumer, 500)) == [f"{i}".encode() for i in range(500)]


def test_batch_index_acks_keep_the_rest_of_a_batch(mclient, topic):
    consumer = mclient.subscribe(topic, "bi", consumer_type=magnetar.ConsumerType.Shared)
    producer = mclient.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(6):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    got = receive_n(consumer, 6, ack=False)
    for m in got:
        if int(m.data()) % 2 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = mclient.subscribe(topic, "bi", consumer_type=magnetar.ConsumerType.Shared)
    assert sorted(payloads(receive_n(consumer, 3))) == [b"1", b"3", b"5"]


def test_cumulative_ack_and_negative_ack(mclient, topic):
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100)
    producer = mclient.create_producer(topic)
    producer.send(b"again")
    first = receive_n(consumer, 1, ack=False)[0]
    consumer.negative_acknowledge(first)
    second = receive_n(consumer, 1)[0]
    assert second.data() == b"again" and second.redelivery_count() == 1

    excl = mclient.subscribe(topic, "cumulative", initial_position=magnetar.InitialPosition.Earliest)
    for i in range(4):
        producer.send(f"{i}".encode())
    got = receive_n(excl, 5, ack=False)
    excl.acknowledge_cumulative(got[2])
    excl.close()
    excl = mclient.subscribe(topic, "cumulative")
    assert payloads(receive_n(excl, 2)) == [b"2", b"3"]


def test_readers_seek_and_last_message_id(mclient, topic):
    producer = mclient.create_producer(topic)
    ids = [producer.send(f"{i}".encode()) for i in range(5)]
    reader = mclient.create_reader(topic, magnetar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    assert not reader.has_message_available()
    from_id = mclient.create_reader(topic, ids[1])
    assert from_id.read_next(5000).data() == b"2"
    inclusive = mclient.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"1"
    consumer = mclient.subscribe(topic, "seek", initial_position=magnetar.InitialPosition.Earliest)
    receive_n(consumer, 5)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())
    consumer.seek(ids[3])
    assert payloads(receive_n(consumer, 1)) == [b"4"]  # the seek target counts as consumed, as in the official clients


def test_message_id_serialization_round_trips():
    mid = magnetar.MessageId(5, 7, 2, 1)
    assert magnetar.MessageId.deserialize(mid.serialize()) == mid
    assert magnetar.MessageId.earliest < mid < magnetar.MessageId.latest


@pytest.mark.parametrize("args, kwargs", [
    ((2, 5, 7, 3), {}),
    ((), {"ledger_id": 5, "entry_id": 7}),
    ((-1, 9, 0), {}),
    ((), {}),
])
def test_message_id_takes_the_official_clients_arguments(args, kwargs):
    """Code written for pulsar-client builds the same id: pulsar.MessageId(partition, ledger_id, entry_id,
    batch_index), positional or by name (magnetar's constructor once took the ledger first)."""
    ours, theirs = magnetar.MessageId(*args, **kwargs), pulsar.MessageId(*args, **kwargs)
    assert (ours.partition(), ours.ledger_id(), ours.entry_id(), ours.batch_index()) == \
           (theirs.partition(), theirs.ledger_id(), theirs.entry_id(), theirs.batch_index())


def test_interop_both_ways_with_the_official_client(mclient, standalone, topic):
    official = pulsar.Client(standalone.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        theirs = official.subscribe(topic, "theirs")
        ours = mclient.subscribe(topic, "ours")
        mine = mclient.create_producer(topic, batching_enabled=True)
        for i in range(20):
            mine.send_async(f"mag-{i}".encode(), None, properties={"from": "magnetar"})
        mine.flush()
        other = official.create_producer(topic, batching_enabled=True, compression_type=pulsar.CompressionType.NONE)
        for i in range(20):
            other.send_async(f"pul-{i}".encode(), None)
        other.flush()
        expected = [f"mag-{i}".encode() for i in range(20)] + [f"pul-{i}".encode() for i in range(20)]
        got_theirs = receive_n(theirs, 40)
        assert payloads(got_theirs) == expected and got_theirs[0].properties() == {"from": "magnetar"}
        assert payloads(receive_n(ours, 40)) == expected
    finally:
        official.close()


def test_bad_input_gives_clear_exceptions(standalone, topic):
    client = magnetar.Client(standalone.service_url, operation_timeout_seconds=10)
    with pytest.raises(magnetar.InvalidTopicName, match="invalid topic"):
        client.create_producer("persistent://public/default/a/b/c")
    producer = client.create_producer(topic)
    with pytest.raises(magnetar.MessageTooBig):
        producer.send(b"x" * (5 * 1024 * 1024 + 1))
    with pytest.raises(magnetar.Timeout):
        client.subscribe(topic, "s").receive(timeout_millis=100)
    with pytest.raises(ValueError, match="max_pending_messages"):
        client.create_producer(topic, max_pending_messages=0)
    with pytest.raises(TypeError, match="unknown send options: colour"):
        producer.send_async(b"x", None, colour="red")
    with pytest.raises(TypeError, match="must be bytes"):
        producer.send("text")
    with pytest.raises(ValueError, match="pulsar://"):
        magnetar.Client("http://localhost:6650")
    client.close()
    with pytest.raises(magnetar.AlreadyClosed):
        producer.send(b"after close")
    assert time.time() > 0


@pytest.mark.parametrize("compression", ["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_compression_interoperates_with_the_official_client(mclient, standalone, topic, compression):
    official = pulsar.Client(standalone.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        theirs = official.subscribe(topic, "theirs")
        ours = mclient.subscribe(topic, "ours")
        mine = mclient.create_producer(topic, batching_enabled=True,
                                       compression_type=getattr(magnetar.CompressionType, compression))
        # the Python wrapper of the official client offers no ZLIB producer; its consumer reads it
        other = official.create_producer(topic, batching_enabled=True,
                                         compression_type=getattr(pulsar.CompressionType, compression,
                                                                  pulsar.CompressionType.NONE))
        for i in range(30):
            mine.send_async(b"compressible payload " * 10 + b"m%d" % i, None)
        mine.flush()
        for i in range(30):
            other.send_async(b"compressible payload " * 10 + b"p%d" % i, None)
        other.flush()
        expected = [b"compressible payload " * 10 + b"m%d" % i for i in range(30)] + \
                   [b"compressible payload " * 10 + b"p%d" % i for i in range(30)]
        assert payloads(receive_n(theirs, 60)) == expected
        assert payloads(receive_n(ours, 60)) == expected
    finally:
        official.close()


def test_partitioned_topic_routes_by_key_and_round_robin(mclient, standalone, topic):
    import json
    import urllib.request

    name = topic.split("://", 1)[1]
    req = urllib.request.Request(f"{standalone.web_url}/admin/v2/persistent/{name}/partitions", data=b"3", method="PUT",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
    assert mclient.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = mclient.subscribe(topic, "all", consumer_type=magnetar.ConsumerType.Shared)
    producer = mclient.create_producer(topic)
    for i in range(30):
        producer.send(f"{i}".encode())
    for i in range(10):
        producer.send(f"k{i}".encode(), partition_key="same-key")
    got = receive_n(consumer, 40)
    assert sorted(m.data() for m in got) == sorted([f"{i}".encode() for i in range(30)] + [f"k{i}".encode() for i in range(10)])
    assert len({m.topic_name() for m in got if not m.data().startswith(b"k")}) == 3  # round robin reached all
    keyed = [m for m in got if m.data().startswith(b"k")]
    assert len({m.topic_name() for m in keyed}) == 1  # one key, one partition
    assert [m.data() for m in keyed] == [f"k{i}".encode() for i in range(10)]  # in order
    assert json.loads(urllib.request.urlopen(f"{standalone.web_url}/admin/v2/persistent/{name}/partitions").read())["partitions"] == 3


def test_unsubscribe_removes_the_subscription(mclient, topic):
    producer = mclient.create_producer(topic)
    consumer = mclient.subscribe(topic, "gone")
    producer.send(b"before")
    consumer.unsubscribe()
    producer.send(b"after")
    consumer = mclient.subscribe(topic, "gone", initial_position=magnetar.InitialPosition.Latest)
    assert_nothing_more(consumer)
    producer.send(b"new")
    assert payloads(receive_n(consumer, 1)) == [b"new"]


# ---- code written for pulsar-client, run with `import pulsar` and with `import magnetar` -------------------


@pytest.fixture(params=["pulsar", "magnetar"])
def either(request, standalone):
    """(module, Client) of the official client or of magnetar, on the module's standalone broker."""
    module = importlib.import_module(request.param)
    options = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)} if module is pulsar else {}
    c = module.Client(standalone.service_url, operation_timeout_seconds=15, **options)
    yield module, c
    c.close()


def _stored(standalone, topic: str) -> int:
    """Messages the broker stored on ``topic`` (msgInCounter of its stats)."""
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{standalone.web_url}/admin/v2/persistent/{name}/stats", timeout=10) as resp:
        return json.loads(resp.read())["msgInCounter"]


def test_send_async_callbacks_follow_the_official_contract(either, topic):
    module, client = either
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True)
    results = []
    for i in range(300):
        producer.send_async(f"{i}".encode(), lambda res, msg_id, i=i: results.append((i, res, msg_id)))
        if i == 150:
            producer.send_async(b"x" * TOO_BIG, lambda res, msg_id: results.append(("too big", res, msg_id)))
    producer.flush()
    wait_until(lambda: len(results) == 301, 20, "every callback")
    [(_, res, msg_id)] = [r for r in results if r[0] == "too big"]
    assert res == module.Result.MessageTooBig and res != module.Result.Ok
    assert (msg_id.ledger_id(), msg_id.entry_id()) == (-1, -1)  # the official client's id of a failed send
    stored = [r for r in results if r[0] != "too big"]
    assert [i for i, _, _ in stored] == list(range(300))  # callbacks fire in send order
    assert all(res == module.Result.Ok and res == pulsar.Result.Ok for _, res, _ in stored)
    ids = [msg_id for _, _, msg_id in stored]
    assert ids == sorted(ids) and ids[0] < ids[-1]
    assert payloads(receive_n(consumer, 300)) == [f"{i}".encode() for i in range(300)]
    assert_nothing_more(consumer)


def test_send_returns_the_id_and_raises_the_error_and_a_closed_producer_refuses(either, topic):
    module, client = either
    producer = client.create_producer(topic)
    first, second = producer.send(b"a"), producer.send(b"b")
    assert first < second and second.entry_id() == first.entry_id() + 1
    with pytest.raises(module.MessageTooBig):
        producer.send(b"x" * TOO_BIG)
    producer.close()
    with pytest.raises(module.AlreadyClosed):
        producer.send(b"c")
    with pytest.raises(module.AlreadyClosed):
        producer.flush()
    results = []
    producer.send_async(b"d", lambda res, msg_id: results.append(res))
    wait_until(lambda: results, 10, "the callback of a send after close")
    assert results == [module.Result.AlreadyClosed]


def test_a_full_queue_fails_sends_unless_told_to_block(either, standalone, topic):
    module, client = either
    producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=5)
    results = []
    for i in range(1000):
        producer.send_async(f"{i}".encode(), lambda res, msg_id: results.append(res))
    producer.flush()
    wait_until(lambda: len(results) == 1000, 20, "every callback")
    counts = collections.Counter(results)
    assert set(counts) == {module.Result.Ok, module.Result.ProducerQueueIsFull} and counts[module.Result.Ok] >= 5
    wait_until(lambda: _stored(standalone, topic) == counts[module.Result.Ok], 10, "the stored count")


def test_blocking_producers_shared_by_threads_store_everything_in_order(either, standalone, topic):
    module, client = either
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2,
                                      max_pending_messages=50, block_if_queue_full=True)
    results = collections.Counter()

    def produce(name: str) -> None:
        for i in range(1500):
            producer.send_async(f"{name}-{i}".encode(), lambda res, msg_id: results.update([res]))

    threads = [threading.Thread(target=produce, args=(name,)) for name in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    producer.flush()
    wait_until(lambda: results[module.Result.Ok] == 4500, 20, "4,500 successful callbacks")
    assert _stored(standalone, topic) == 4500
    got = [m.decode() for m in payloads(receive_n(consumer, 4500))]
    for name in ("a", "b", "c"):  # each thread's messages in its order
        assert [int(m.split("-")[1]) for m in got if m.startswith(name)] == list(range(1500))


def test_close_sends_what_is_queued(mclient, standalone, topic):
    """magnetar's close waits for what is queued (the official client's C++ core fails it with AlreadyClosed)."""
    producer = mclient.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50,
                                       max_pending_messages=100, block_if_queue_full=True)
    results = []
    for i in range(2000):
        producer.send_async(f"{i}".encode(), lambda res, msg_id: results.append(res))
    producer.close()
    assert results == [magnetar.Result.Ok] * 2000 and _stored(standalone, topic) == 2000


def test_client_close_sends_what_its_producers_queued(standalone, topic):
    client = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=100_000)
    results = []
    for i in range(5000):
        producer.send_async(f"{i}".encode(), lambda res, msg_id: results.append(res))
    client.close()
    assert results == [magnetar.Result.Ok] * 5000 and _stored(standalone, topic) == 5000


def test_a_raising_callback_does_not_stop_the_others(mclient, topic):
    producer = mclient.create_producer(topic, batching_enabled=True)
    results = []

    def callback(res, msg_id):
        results.append(res)
        if len(results) % 2:
            raise RuntimeError("callback fails")

    for i in range(10):
        producer.send_async(b"%d" % i, callback)
    producer.flush()
    assert results == [magnetar.Result.Ok] * 10
    assert producer.send(b"after") is not None


def test_send_in_a_callback_fails_clearly_and_send_async_there_does_not_block(mclient, topic):
    producer = mclient.create_producer(topic, max_pending_messages=1, block_if_queue_full=True)
    seen = []

    def callback(res, msg_id):
        try:
            producer.send(b"nested")
        except RuntimeError as exc:
            seen.append(str(exc))
        producer.send_async(b"nested-async", lambda r, m: seen.append(r))  # full: fails instead of blocking the loop

    producer.send_async(b"outer", callback)
    producer.flush()
    wait_until(lambda: len(seen) == 2, 10, "the nested sends")
    assert "use send_async" in seen[0] and seen[1] in (magnetar.Result.Ok, magnetar.Result.ProducerQueueIsFull)
