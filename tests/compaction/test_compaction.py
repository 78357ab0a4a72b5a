"""Topic compaction end to end, with the official client and magnetar against a real standalone broker."""

from __future__ import annotations

import pytest

from tests.compaction.support import admin_path, as_table, compact, compaction_status, read_available
from tests.official_client.support import admin_call


@pytest.fixture
def client(any_client):
    return any_client


def _produce(client, topic, items, batching=False):
    """Send everything asynchronously (in order), then wait for every receipt."""
    producer = client.create_producer(topic, batching_enabled=batching, block_if_queue_full=True)
    failed = []
    for key, value in items:
        producer.send_async(value, lambda res, _id: failed.append(res) if str(res).split(".")[-1] != "Ok" else None, partition_key=key)
    producer.flush()
    producer.close()
    assert not failed, failed[:3]


def test_compacted_consumer_and_reader_see_the_last_value_per_key(client, api, standalone, topic):
    """The conformance suite's test_publish_compact_and_consume, on both clients."""
    consumer = client.subscribe(topic, "my-sub1", is_read_compacted=True)
    consumer.close()
    plain = client.subscribe(topic, "my-sub2", is_read_compacted=False)
    _produce(client, topic, [("key0", b"hello-0"), ("key0", b"hello-1")])
    assert compaction_status(standalone, topic)["status"] == "NOT_RUN"
    compact(standalone, topic)

    compacted = client.subscribe(topic, "my-sub1", is_read_compacted=True)
    msg = compacted.receive(10_000)
    assert msg.data() == b"hello-1"
    compacted.acknowledge(msg)
    compacted.close()

    reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
    assert [m.data() for m in read_available(reader)] == [b"hello-1"]
    reader.close()

    assert [plain.receive(10_000).data() for _ in range(2)] == [b"hello-0", b"hello-1"]
    raw = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=False)
    assert [m.data() for m in read_available(raw)] == [b"hello-0", b"hello-1"]


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_ten_thousand_messages_over_100_keys_with_10_tombstones(client, api, standalone, topic, batching):
    """The issue's Must show: a compacted reader sees exactly the 90 live keys with their last values."""
    items = [(f"key-{i % 100}", f"value-{i}".encode()) for i in range(10_000)]
    items += [(f"key-{k}", b"") for k in range(0, 100, 10)]  # tombstones for key-0, key-10, ..., key-90
    _produce(client, topic, items, batching=batching)
    expected = {f"key-{k}": f"value-{9_900 + k}".encode() for k in range(100) if k % 10}

    status = compact(standalone, topic)
    assert status["lastRun"]["keys"] == 90

    reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
    seen = read_available(reader)
    assert len(seen) == 90
    assert {m.partition_key(): m.data() for m in seen} == expected
    reader.close()

    # New messages come after the compacted view, and a later run folds them in.
    _produce(client, topic, [("key-1", b"newer"), ("key-0", b"back"), ("key-2", b"")], batching=batching)
    reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
    seen = read_available(reader)
    assert len(seen) == 93
    assert [(m.partition_key(), m.data()) for m in seen[-3:]] == [("key-1", b"newer"), ("key-0", b"back"), ("key-2", b"")]
    reader.close()
    compact(standalone, topic)
    reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
    table = as_table(read_available(reader))
    expected.update({"key-1": b"newer", "key-0": b"back"})
    del expected["key-2"]
    assert table == expected and len(table) == 90


def test_status_and_refusals(client, api, standalone, topic):
    _produce(client, topic, [("k", b"v")])
    status, body = admin_call(standalone, "GET", "/admin/v2/persistent/public/default/no-such-topic-xyz/compaction")
    assert status == 404, body
    # The official client refuses this itself (InvalidConfiguration); magnetar leaves it to the broker.
    with pytest.raises(Exception, match="InvalidConfiguration|only allowed on Exclusive and Failover"):
        client.subscribe(topic, "shared-compacted", consumer_type=api.ConsumerType.Shared, is_read_compacted=True)
    with pytest.raises(Exception, match="reserved|NotAllowed"):
        client.subscribe(topic, "__compaction")


def test_table_view_follows_updates_live(client, standalone, topic):
    _produce(client, topic, [("a", b"1"), ("b", b"2"), ("a", b"3")])
    compact(standalone, topic)
    _produce(client, topic, [("c", b"4")])
    view = client.create_table_view(topic)
    assert len(view) == 3 and view.get("a") == b"3" and view.get("c") == b"4"
    seen = {}
    view.for_each_and_listen(lambda k, v: seen.__setitem__(k, v))
    assert seen == {"a": b"3", "b": b"2", "c": b"4"}

    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"5", partition_key="a")
    producer.send(b"", partition_key="b")
    from storage.testing.waiting import wait_until

    wait_until(lambda: view.get("a") == b"5" and view.get("b") is None, 10, "the table view to follow the topic")
    wait_until(lambda: seen.get("a") == b"5" and seen.get("b") == b"", 10, "the listener to see the updates")
    assert len(view) == 2
    view.close()


def test_the_namespace_compaction_threshold_starts_a_run(client, api, standalone, request):
    """Past compactionThreshold bytes after the horizon a run starts by itself; a namespace without one never."""
    import uuid

    ns = f"public/auto-{uuid.uuid4().hex[:8]}"
    assert admin_call(standalone, "PUT", f"/admin/v2/namespaces/{ns}", body={})[0] == 204
    assert admin_call(standalone, "POST", f"/admin/v2/namespaces/{ns}/compactionThreshold", body=20_000)[0] == 204
    assert admin_call(standalone, "GET", f"/admin/v2/namespaces/{ns}/compactionThreshold") == (200, 20_000)
    status, body = admin_call(standalone, "POST", f"/admin/v2/namespaces/{ns}/compactionThreshold", body=-5)
    assert status == 400, body

    topic, other = f"persistent://{ns}/auto", "persistent://public/default/" + f"no-threshold-{uuid.uuid4().hex[:8]}"
    items = [(f"k{i % 5}", f"{i}-".encode().ljust(1000, b"x")) for i in range(10)]
    _produce(client, topic, items)
    _produce(client, other, items)
    assert compaction_status(standalone, topic)["status"] == "NOT_RUN"  # 10 KB: under the threshold
    _produce(client, topic, items * 2)
    from tests.compaction.support import wait_compacted

    wait_compacted(standalone, topic)
    assert compaction_status(standalone, other)["status"] == "NOT_RUN"
    # The run started once 20 KB were stored (while the producer went on): the view up to its horizon, then the rest.
    reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
    seen = read_available(reader)
    assert as_table(seen) == {f"k{i}": f"{5 + i}-".encode().ljust(1000, b"x") for i in range(5)}
    assert len(seen) < 30  # some of the topic was compacted away


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_null_value_tombstones(client, api, standalone, topic, batching):
    """The conformance suite's test_null_value_compaction: send(None) deletes a key (null_value, not an empty value)."""
    consumer = client.subscribe(topic, "my-sub1", is_read_compacted=True)
    consumer.close()
    producer = client.create_producer(topic, batching_enabled=batching)
    for key, value in [("key1", b"hello-1"), ("key1", None), ("key2", b"hello-2"), ("key3", b"hello-3"),
                       ("key3", None), ("key4", b"hello-4")]:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    compact(standalone, topic)
    consumer = client.subscribe(topic, "my-sub1", is_read_compacted=True)
    got = [consumer.receive(10_000) for _ in range(2)]
    assert [(m.partition_key(), m.data()) for m in got] == [("key2", b"hello-2"), ("key4", b"hello-4")]
    with pytest.raises(api.Timeout):
        consumer.receive(500)  # nothing more: key1 and key3 are gone

    view = client.create_table_view(topic)
    assert view.get("key2") == b"hello-2" and view.get("key1") is None and len(view) == 2
    producer.send(None, partition_key="key2")
    from storage.testing.waiting import wait_until

    wait_until(lambda: view.get("key2") is None and len(view) == 1, 10, "the table view to drop key2")
    view.close()


def test_a_partitioned_topic_compacts_every_partition(client, api, standalone, topic):
    status, body = admin_call(standalone, "PUT", admin_path(topic) + "/partitions", body=3)
    assert status == 204, body
    _produce(client, topic, [(f"k{i % 30}", f"{i}".encode()) for i in range(300)])
    assert compaction_status(standalone, topic)["status"] == "NOT_RUN"
    done = compact(standalone, topic)
    assert sorted(done["partitions"]) == [f"{topic}-partition-{i}" for i in range(3)]
    assert sum(p["lastRun"]["keys"] for p in done["partitions"].values()) == 30
    seen = {}
    for i in range(3):
        reader = client.create_reader(f"{topic}-partition-{i}", api.MessageId.earliest, is_read_compacted=True)
        seen.update((m.partition_key(), m.data()) for m in read_available(reader))
        reader.close()
    assert seen == {f"k{k}": str(270 + k).encode() for k in range(30)}


def test_a_durable_compacted_consumer_acknowledges_rewritten_batches(client, api, standalone, topic):
    """Acknowledging every kept message of a batch with placeholders consumes the entry: nothing comes back."""
    from tests.official_client.support import assert_nothing_more

    items = [(f"k{i % 50}", f"{i}".encode()) for i in range(130)]  # batches where only some messages are newest
    _produce(client, topic, items, batching=True)
    compact(standalone, topic)
    consumer = client.subscribe(topic, "durable-compacted", is_read_compacted=True,
                                initial_position=api.InitialPosition.Earliest)
    got = [consumer.receive(10_000) for _ in range(50)]
    assert {m.partition_key(): m.data() for m in got} == {f"k{k}": str(100 + k if k < 30 else 50 + k).encode() for k in range(50)}
    for m in got:
        consumer.acknowledge(m)
    assert_nothing_more(consumer, within_ms=500)
    from storage.testing.waiting import wait_until

    def unacked():
        stats = admin_call(standalone, "GET", admin_path(topic) + "/stats")[1]
        return stats["subscriptions"]["durable-compacted"]["unackedMessages"]

    # Acknowledgements are grouped by both clients: the broker has them all once nothing is unacknowledged.
    wait_until(lambda: unacked() == 0, 10, "the acknowledgements to reach the broker")
    consumer.close()
    consumer = client.subscribe(topic, "durable-compacted", is_read_compacted=True)
    assert_nothing_more(consumer, within_ms=1000)
    consumer.close()


def test_a_table_view_with_a_schema(client, api, topic):
    """The conformance suite's TableView test_schema: values decoded with the view's schema."""
    import importlib

    schema = importlib.import_module(f"{api.__name__}.schema")
    view = client.create_table_view(topic, schema=schema.StringSchema())
    producer = client.create_producer(topic, schema=schema.StringSchema())
    producer.send("value", partition_key="key")
    from storage.testing.waiting import wait_until

    wait_until(lambda: view.get("key") == "value", 10, "the table view to see the first value")
    assert view.get("missed-key") is None
    entries = {}
    view.for_each(lambda k, v: entries.__setitem__(k, v))
    assert entries == {"key": "value"}
    producer.send("new-value", partition_key="key")
    wait_until(lambda: view.get("key") == "new-value", 10, "the table view to see the update")
    view.close()
