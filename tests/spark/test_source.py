"""``spark.readStream.format("magnetar")`` and ``spark.read.format("magnetar")`` against a real standalone broker."""

from __future__ import annotations

import collections
import json
import re
import uuid

import pulsar
import pytest

from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call, receive_n


def produce(client, topic: str, values: list[bytes], batched: bool, batch_size: int = 100) -> list:
    """Publish ``values`` keyed by themselves (so they spread over partitions); returns their message ids."""
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=batch_size,
                                      block_if_queue_full=True, batching_max_publish_delay_ms=5)
    ids = []
    for value in values:
        producer.send_async(value, lambda res, mid: ids.append(mid), partition_key=value.decode())
    producer.flush()
    producer.close()
    assert len(ids) == len(values)
    return ids


def admin_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def run_to_end(query) -> None:
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_stream_delivers_every_message_once_across_a_restart_and_commits_its_progress(
        spark, magnetar_format, client, partitioned, standalone, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run():
        frame = magnetar_format(topic=partitioned, subscription="etl").select("value", "partition", "messageId")
        run_to_end(frame.writeStream.format("parquet").option("path", str(out))
                   .option("checkpointLocation", str(checkpoint)).start())
        return spark.read.parquet(str(out)).collect()

    first = [b"a-%05d" % i for i in range(10_000)]
    produce(client, partitioned, first[:5_000], batched=True)
    produce(client, partitioned, first[5_000:], batched=False)
    rows = run()
    assert collections.Counter(r.value for r in rows) == collections.Counter(first)
    assert {r.partition for r in rows} == {0, 1, 2}
    assert len({r.messageId for r in rows}) == len(first)

    # Close each partition's ledger so that, once the query commits past it, retention may delete it.
    old_ledgers = {}
    for i in range(3):
        part = f"{partitioned}-partition-{i}"
        old_ledgers[part] = [l["ledgerId"] for l in admin_call(standalone, "GET", admin_path(part) + "/internalStats")[1]["ledgers"]]
        assert admin_call(standalone, "PUT", admin_path(part) + "/unload")[0] == 204

    second = [b"b-%05d" % i for i in range(5_000)]
    produce(client, partitioned, second[:2_500], batched=True)
    produce(client, partitioned, second[2_500:], batched=False)
    rows = run()  # restarts from the checkpoint
    assert collections.Counter(r.value for r in rows) == collections.Counter(first + second)  # none twice, none lost

    def backlog():
        return admin_call(standalone, "GET", admin_path(partitioned) + "/partitioned-stats")[1]["msgBacklog"]

    wait_until(lambda: backlog() == 0, 30, "the subscription's backlog to reach zero after the query committed")

    def trimmed():
        for part, ledgers in old_ledgers.items():
            now = {l["ledgerId"] for l in admin_call(standalone, "GET", admin_path(part) + "/internalStats")[1]["ledgers"]}
            if now & set(ledgers):
                return False
        return True

    wait_until(trimmed, 30, "retention to delete the ledgers the query has consumed")


def to_memory(frame, name: str) -> list[int]:
    """Run ``frame`` into the memory table ``name`` until it has read everything; the rows of each micro-batch."""
    query = frame.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()


def test_max_messages_per_trigger_bounds_every_micro_batch(spark, magnetar_format, client, topic):
    values = [b"m-%05d" % i for i in range(5_000)]
    produce(client, topic, values, batched=True, batch_size=300)  # the limits fall inside batches
    name = f"limited_{uuid.uuid4().hex[:8]}"
    sizes = to_memory(magnetar_format(topic=topic, maxMessagesPerTrigger=1000), name)
    assert max(sizes) <= 1000 and sum(sizes) == 5_000
    assert sorted(r.value for r in spark.sql(f"select value from {name}").collect()) == values


def test_available_now_reads_what_was_there_at_start_in_limited_batches_and_ends(spark, magnetar_format, client, topic, tmp_path):
    produce(client, topic, [b"old-%04d" % i for i in range(2_500)], batched=True)
    seen: list[list[bytes]] = []

    def record(batch, batch_id):
        seen.append(sorted(r.value for r in batch.select("value").collect()))
        if batch_id == 0:  # arrives after the query fixed its target: left for the next run
            produce(client, topic, [b"late-%02d" % i for i in range(50)], batched=False)

    def run():
        query = (magnetar_format(topic=topic, maxMessagesPerTrigger=1000).writeStream.foreachBatch(record)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "an AvailableNow query ends by itself"
        assert query.exception() is None

    run()
    assert [len(rows) for rows in seen] == [1000, 1000, 500]
    assert sorted(v for rows in seen for v in rows) == [b"old-%04d" % i for i in range(2_500)]
    seen.clear()
    run()  # from the checkpoint: exactly the messages that arrived during the first run
    assert [v for rows in seen for v in rows] == [b"late-%02d" % i for i in range(50)]


def test_topics_matching_a_pattern_are_found_as_they_appear(spark, magnetar_format, client):
    prefix = f"persistent://public/default/pat-{uuid.uuid4().hex[:8]}"
    produce(client, f"{prefix}-a", [b"a1", b"a2"], batched=False)
    name = f"pattern_{uuid.uuid4().hex[:8]}"
    query = magnetar_format(topicsPattern=f"{prefix}-.*").writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        produce(client, f"{prefix}-b", [b"b1"], batched=False)  # a new topic, found on a later trigger
        produce(client, f"{prefix}-a", [b"a3"], batched=False)
        wait_until(lambda: spark.sql(f"select count(*) as n from {name}").collect()[0].n == 4, 60,
                   "the new topic's message to arrive")
    finally:
        query.stop()
    rows = spark.sql(f"select topic, value from {name}").collect()
    assert sorted((r.topic, r.value) for r in rows) == [
        (f"{prefix}-a", b"a1"), (f"{prefix}-a", b"a2"), (f"{prefix}-a", b"a3"), (f"{prefix}-b", b"b1")]


def test_batch_read_between_offsets_returns_exactly_that_range(magnetar_format, client, topic):
    values = [b"v-%03d" % i for i in range(200)]
    ids = produce(client, topic, values, batched=True, batch_size=30)
    start, end = ids[44], ids[150]  # both inside batches
    as_offset = lambda mid: f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}"
    rows = magnetar_format(stream=False, topic=topic, startingOffsets=json.dumps({topic: as_offset(start)}),
                           endingOffsets=json.dumps({topic: as_offset(end)})).collect()
    assert sorted(r.value for r in rows) == values[45:151]  # start exclusive, end inclusive
    row = min(rows, key=lambda r: r.value)
    assert row.key == "v-045" and row.partition == -1 and row.topic == topic
    assert pulsar.MessageId.deserialize(row.messageId) == ids[45]
    everything = magnetar_format(stream=False, topic=topic).collect()
    assert sorted(r.value for r in everything) == values
    split = magnetar_format(stream=False, topic=topic, minPartitions=3)  # cut at entry boundaries into 3 tasks
    assert split.rdd.getNumPartitions() == 3
    assert sorted(r.value for r in split.collect()) == values


def test_fail_on_data_loss_fails_or_skips_what_retention_deleted(magnetar_format, client, standalone, topic):
    holder = client.subscribe(topic, "holder")
    old = produce(client, topic, [b"old-%02d" % i for i in range(50)], batched=False)
    assert admin_call(standalone, "PUT", admin_path(topic) + "/unload")[0] == 204
    new_values = [b"new-%02d" % i for i in range(50)]
    new = produce(client, topic, new_values, batched=False)
    assert new[0].ledger_id() != old[0].ledger_id()
    # The holder reconnected after the unload; once it has everything, its cumulative ack moves it past the
    # old ledger, and retention deletes that ledger.
    holder.acknowledge_cumulative(receive_n(holder, 100, ack=False)[-1])

    def ledgers():
        return {l["ledgerId"] for l in admin_call(standalone, "GET", admin_path(topic) + "/internalStats")[1]["ledgers"]}

    wait_until(lambda: old[0].ledger_id() not in ledgers(), 30, "retention to delete the old ledger")
    starting = json.dumps({topic: f"{old[10].ledger_id()}:{old[10].entry_id()}"})
    with pytest.raises(Exception) as err:
        magnetar_format(stream=False, topic=topic, startingOffsets=starting).collect()
    message = str(err.value)
    assert "data loss on " + topic in message and f"{old[10].ledger_id()}:{old[10].entry_id()}" in message
    assert "failOnDataLoss=false" in message
    rows = magnetar_format(stream=False, topic=topic, startingOffsets=starting, failOnDataLoss="false").collect()
    assert sorted(r.value for r in rows) == new_values  # what is left, once each


@pytest.mark.parametrize("stream, options, named", [
    (True, {"startOffsets": "earliest"}, "unknown option(s) startOffsets"),
    (True, {"topics": "a,b"}, "exactly one of"),
    (True, {"endingOffsets": "latest"}, "endingOffsets"),
    (True, {"maxMessagesPerTrigger": "-5"}, "maxMessagesPerTrigger"),
    (False, {"startingOffsets": "latest"}, "startingOffsets=latest"),
    (False, {"startingOffsets": '{"persistent://public/default/elsewhere": "1:2"}'}, "elsewhere"),
])
def test_invalid_options_fail_the_query_at_start_naming_the_option(magnetar_format, client, topic, stream, options, named):
    produce(client, topic, [b"x"], batched=False)
    with pytest.raises(Exception, match="(?i)" + re.escape(named)):
        frame = magnetar_format(stream=stream, topic=topic, **options)
        if stream:
            run_to_end(frame.writeStream.format("memory").queryName(f"bad_{uuid.uuid4().hex[:8]}").start())
        else:
            frame.collect()


def test_a_missing_topic_is_an_error_unless_the_query_waits_for_it(spark, magnetar_format, client, topic):
    with pytest.raises(Exception, match="does not exist.*waitingForNonExistedTopic"):
        run_to_end(magnetar_format(topic=topic).writeStream.format("memory").queryName(f"missing_{uuid.uuid4().hex[:8]}").start())
    name = f"waiting_{uuid.uuid4().hex[:8]}"
    query = magnetar_format(topic=topic, waitingForNonExistedTopic="true").writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert spark.sql(f"select * from {name}").count() == 0
        produce(client, topic, [b"late-1", b"late-2"], batched=False)  # creates the topic
        wait_until(lambda: spark.sql(f"select * from {name}").count() == 2, 60, "the late topic's messages")
    finally:
        query.stop()


def test_partitions_added_to_a_running_query_are_read_from_their_start(spark, magnetar_format, client, partitioned, standalone):
    produce(client, partitioned, [b"before-%d" % i for i in range(30)], batched=False)
    name = f"grown_{uuid.uuid4().hex[:8]}"
    query = magnetar_format(topic=partitioned).writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert admin_call(standalone, "POST", admin_path(partitioned) + "/partitions", 4)[0] == 204
        produce(client, f"{partitioned}-partition-3", [b"new-1", b"new-2"], batched=False)
        wait_until(lambda: spark.sql(f"select * from {name}").count() == 32, 60, "the new partition's messages")
    finally:
        query.stop()
    rows = spark.sql(f"select partition, value from {name} where partition = 3").collect()
    assert sorted(r.value for r in rows) == [b"new-1", b"new-2"]


def test_a_replayed_task_yields_the_same_rows(standalone, client, topic):
    """What makes a retried micro-batch exact: reading one planned range twice gives identical rows."""
    from connectors.spark.options import parse_source_options
    from connectors.spark.source import MagnetarBatchReader

    produce(client, topic, [b"r-%04d" % i for i in range(3_000)], batched=True, batch_size=70)
    reader = MagnetarBatchReader(parse_source_options({
        "service.url": standalone.service_url, "admin.url": standalone.web_url, "topic": topic,
        "startingOffsets": "earliest", "minPartitions": "4"}))
    tasks = reader.partitions()
    assert len(tasks) == 4

    def rows(task):
        return [r for batch in reader.read(task) for r in batch.to_pylist()]

    first = [rows(task) for task in tasks]
    assert [rows(task) for task in tasks] == first
    values = [r["value"] for task_rows in first for r in task_rows]
    assert sorted(values) == [b"r-%04d" % i for i in range(3_000)]  # the tasks partition the range exactly
