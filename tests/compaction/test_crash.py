"""kill -9 in the middle of a compaction run leaves a consistent view: the previous one, whole.

The broker is stopped (SIGSTOP) as soon as its status says phase two is under way -- the new compacted ledger
exists and is named in the __compaction cursor as pending, the horizon has not moved -- and then killed, so
the kill lands inside the run every time. The runs killed keep half their input (5,000 keys over 10,000
messages), so phase two writes thousands of entries and lasts long enough to be caught at it. After a restart the view is the one before the run, the pending
ledger is forgotten (and deleted), and a new run completes.
"""

from __future__ import annotations

import importlib

import pulsar

from storage.testing.waiting import wait_until
from tests.compaction.support import admin_path, compact, compaction_status, read_available, start_compaction
from tests.official_client.support import admin_call

COMPACTION_CURSOR = "__compaction"


def _produce(client, topic, items):
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for key, value in items:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    producer.close()


def _cursor_properties(broker, topic) -> dict:
    status, stats = admin_call(broker, "GET", admin_path(topic) + "/internalStats")
    assert status == 200, stats
    return stats["cursors"].get(COMPACTION_CURSOR, {}).get("properties", {})


def _kill_in_phase_two(broker, topic) -> None:
    start_compaction(broker, topic)
    wait_until(lambda: compaction_status(broker, topic).get("phase") == "phase-two", 60,
               "the compaction run to reach phase two", interval_s=0.01)
    broker.pause()
    broker.kill9()


def _views(broker, topic) -> dict[str, list]:
    """The compacted view read from the earliest message, through each client."""
    out = {}
    for name in ("pulsar", "magnetar"):
        api = importlib.import_module(name)
        kwargs = {"logger": api.ConsoleLogger(api.LoggerLevel.Warn)} if name == "pulsar" else {}
        client = api.Client(broker.service_url, operation_timeout_seconds=30, **kwargs)
        try:
            reader = client.create_reader(topic, api.MessageId.earliest, is_read_compacted=True)
            out[name] = [(m.partition_key(), m.data()) for m in read_available(reader)]
        finally:
            client.close()
    return out


def _items(n, keys, size, tag):
    return [(f"key-{i % keys}", f"{tag}-{i}-".encode().ljust(size, b"x")) for i in range(n)]


def test_kill9_during_the_first_run_leaves_the_uncompacted_topic(start_standalone):
    broker = start_standalone()
    topic = "persistent://public/default/crash-first-run"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    items = _items(10_000, 5_000, 1024, "v") + [(f"key-{k}", b"") for k in range(0, 100, 10)]
    _produce(client, topic, items)
    client.close()
    expected = as_table_of(items)

    _kill_in_phase_two(broker, topic)
    broker.start(timeout_s=60)

    props = _cursor_properties(broker, topic)
    assert "CompactedTopicLedger" not in props and "CompactionPendingLedger" not in props, props
    for name, view in _views(broker, topic).items():
        assert len(view) == len(items), name  # nothing was compacted: the whole topic, in order
        assert view == [(k, v) for k, v in items], name

    compact(broker, topic)
    for name, view in _views(broker, topic).items():
        assert len(view) == 4_990 and dict(view) == expected, name


def test_kill9_during_a_later_run_keeps_the_previous_view(start_standalone):
    broker = start_standalone()
    topic = "persistent://public/default/crash-later-run"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    first = _items(2_000, 100, 64, "first")
    _produce(client, topic, first)
    compact(broker, topic)
    published = _cursor_properties(broker, topic)["CompactedTopicLedger"]
    second = _items(10_000, 5_000, 1024, "second") + [(f"key-{k}", b"") for k in range(0, 100, 10)]
    _produce(client, topic, second)
    client.close()

    _kill_in_phase_two(broker, topic)
    broker.start(timeout_s=60)

    props = _cursor_properties(broker, topic)
    assert props == {"CompactedTopicLedger": published}, props  # the old view, and no pending ledger
    for name, view in _views(broker, topic).items():
        assert len(view) == 100 + len(second), name  # the first run's 100 keys, then the live topic
        assert view[100:] == [(k, v) for k, v in second], name
        assert as_table_pairs(view) == as_table_of(first + second), name

    assert compaction_status(broker, topic)["status"] == "SUCCESS"  # restored from the cursor
    compact(broker, topic)
    for name, view in _views(broker, topic).items():
        assert len(view) == 4_990 and dict(view) == as_table_of(first + second), name


def as_table_of(items) -> dict:
    table = {}
    for k, v in items:
        if v:
            table[k] = v
        else:
            table.pop(k, None)
    return table


def as_table_pairs(pairs) -> dict:
    return as_table_of(pairs)
