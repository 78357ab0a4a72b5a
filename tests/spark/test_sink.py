"""``df.write.format("magnetar")`` and ``df.writeStream.format("magnetar")``: what Spark writes, both clients read."""

from __future__ import annotations

import datetime
import uuid

import pytest

from tests.spark.test_source import produce, run_to_end

UTC = datetime.timezone.utc


def test_batch_write_round_trips_through_both_clients(spark, standalone, any_client, api, topic):
    when = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    rows = [(f"key-{i}", f"value-{i}".encode(), {"n": str(i)}, when + datetime.timedelta(seconds=i)) for i in range(300)]
    frame = spark.createDataFrame(rows, "key string, value binary, properties map<string,string>, eventTime timestamp")
    frame.write.format("magnetar").option("service.url", standalone.service_url).option("topic", topic).mode("append").save()

    reader = any_client.create_reader(topic, api.MessageId.earliest)
    got = [reader.read_next(20_000) for _ in range(300)]
    assert sorted((m.partition_key(), m.data(), m.properties()["n"], m.event_timestamp()) for m in got) == sorted(
        (k, v, p["n"], int(t.timestamp() * 1000)) for k, v, p, t in rows)
    assert not reader.has_message_available()  # each row once


def test_rows_name_their_topics_and_strings_are_accepted_as_values(spark, standalone, client):
    base = f"persistent://public/default/routed-{uuid.uuid4().hex[:8]}"
    frame = spark.createDataFrame([(f"{base}-{i % 2}", f"text-{i}") for i in range(10)], "topic string, value string")
    frame.write.format("magnetar").option("service.url", standalone.service_url).mode("append").save()
    import pulsar

    for side in (0, 1):
        reader = client.create_reader(f"{base}-{side}", pulsar.MessageId.earliest)
        assert sorted(reader.read_next(20_000).data() for _ in range(5)) == sorted(
            f"text-{i}".encode() for i in range(10) if i % 2 == side)


def test_stream_pipes_one_topic_into_another(spark, standalone, magnetar_format, client, topic, tmp_path):
    target = topic + "-copy"
    values = [b"p-%04d" % i for i in range(2_000)]
    produce(client, topic, values, batched=True)
    query = (magnetar_format(topic=topic).select("key", "value").writeStream.format("magnetar")
             .option("service.url", standalone.service_url).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    run_to_end(query)
    import magnetar

    copy = magnetar.Client(standalone.service_url)
    try:
        reader = copy.create_reader(target, magnetar.MessageId.earliest)
        got = [reader.read_next(20_000) for _ in range(2_000)]
        assert sorted(m.data() for m in got) == values
        assert all(m.partition_key() == m.data().decode() for m in got)  # the key column became the key
    finally:
        copy.close()


@pytest.mark.parametrize("schema, data, options, named", [
    ("key string", [("k",)], {"topic": "t"}, "needs a 'value' column"),
    ("value binary", [(b"v",)], {}, "'topic' option or a 'topic' column"),
    ("value binary, key int", [(b"v", 1)], {"topic": "t"}, "column 'key' must be string"),
    ("value binary", [(b"v",)], {"topic": "t", "subscription": "s"}, "unknown option(s) subscription"),
])
def test_bad_sink_input_is_refused_before_anything_is_written(spark, standalone, schema, data, options, named):
    frame = spark.createDataFrame(data, schema)
    writer = frame.write.format("magnetar").option("service.url", standalone.service_url).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=named.replace("(", r"\(").replace(")", r"\)")):
        writer.save()
