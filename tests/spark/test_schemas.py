"""expandSchema: a schema'd topic read as typed columns (the official client writes it, Spark reads it)."""

from __future__ import annotations

import json

import pulsar
import pyarrow as pa
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from connectors.spark.schemas import SchemaExpansionError, expanded_arrow_schema
from tests.official_client.support import admin_call

V0 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "price", "type": ["null", "double"]},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "line", "type": {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]}}]}
V1 = {**V0, "fields": V0["fields"] + [{"name": "note", "type": "string", "default": "none"}]}


def test_avro_types_map_to_columns():
    schema = expanded_arrow_schema({"type": "AVRO", "data": json.dumps(V0)})
    assert schema.field("id").type == pa.int64() and schema.field("price").type == pa.float64()
    assert schema.field("tags").type == pa.list_(pa.string())
    assert schema.field("attrs").type == pa.map_(pa.string(), pa.int32())
    assert schema.field("status").type == pa.string()
    assert schema.field("line").type == pa.struct([("sku", pa.string())])
    assert schema.names[-6:] == ["__key", "__topic", "__messageId", "__publishTime", "__eventTime", "__messageProperties"]


@pytest.mark.parametrize("info", [
    {"type": "INT64", "data": ""},
    {"type": "AVRO", "data": '"string"'},
    {"type": "AVRO", "data": json.dumps({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]})},
    {"type": "AVRO", "data": json.dumps({"type": "record", "name": "R", "fields": [{"name": "__key", "type": "int"}]})},
])
def test_unexpandable_schemas_are_refused(info):
    with pytest.raises(SchemaExpansionError):
        expanded_arrow_schema(info)


def test_expand_an_evolved_avro_topic(standalone, magnetar_format, topic):
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        old = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
        for i in range(3):
            old.send({"id": i, "price": i * 1.5, "tags": ["a"], "attrs": {"k": i}, "status": "NEW",
                      "line": {"sku": f"s{i}"}}, partition_key=f"k{i}")
        new = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
        new.send({"id": 9, "price": None, "tags": [], "attrs": {}, "status": "PAID", "line": {"sku": "s9"},
                  "note": "v1"})
    finally:
        client.close()
    df = magnetar_format(stream=False, topic=topic, expandSchema="true")
    assert df.columns[:7] == ["id", "price", "tags", "attrs", "status", "line", "note"]
    rows = sorted(df.collect(), key=lambda r: r.id)
    assert [(r.id, r.price, r.tags, r.attrs, r.status, r.line.sku, r.note) for r in rows] == [
        (0, 0.0, ["a"], {"k": 0}, "NEW", "s0", "none"), (1, 1.5, ["a"], {"k": 1}, "NEW", "s1", "none"),
        (2, 3.0, ["a"], {"k": 2}, "NEW", "s2", "none"), (9, None, [], {}, "PAID", "s9", "v1")]
    assert [r["__key"] for r in rows] == ["k0", "k1", "k2", None]
    assert {r["__topic"] for r in rows} == {topic}
    assert all(r["__publishTime"] is not None for r in rows)


def test_expand_json_and_string_topics(standalone, magnetar_format, topic):
    class Point(Record):
        x = Integer()
        name = String()

    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        client.create_producer(topic, schema=JsonSchema(Point)).send(Point(x=3, name="p"))
        client.create_producer(topic + "-s", schema=StringSchema()).send("hello")
    finally:
        client.close()
    points = magnetar_format(stream=False, topic=topic, expandSchema="true").collect()
    assert [(r.x, r.name) for r in points] == [(3, "p")]
    strings = magnetar_format(stream=False, topic=topic + "-s", expandSchema="true").collect()
    assert [r.value for r in strings] == ["hello"]


def test_expand_without_a_schema_fails_clearly(standalone, magnetar_format, topic):
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        client.create_producer(topic).send(b"raw")
    finally:
        client.close()
    with pytest.raises(Exception, match="has no schema"):
        magnetar_format(stream=False, topic=topic, expandSchema="true").collect()
    assert admin_call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/schema")[0] == 404


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_sink_writes_a_struct_value_with_a_schema(spark, standalone, magnetar_format, topic, kind):
    rows = [(f"k{i}", (i, f"name-{i}", [i, i + 1], {"a": float(i)})) for i in range(20)]
    frame = spark.createDataFrame(rows, "key string, value struct<id: bigint, name: string, nums: array<int>, "
                                        "scores: map<string,double>>")
    (frame.write.format("magnetar").option("service.url", standalone.service_url).option("topic", topic)
     .option("valueSchema", kind).mode("append").save())

    status, info = admin_call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/schema")
    assert status == 200 and info["type"] == kind.upper()
    assert [f["name"] for f in json.loads(info["data"])["fields"]] == ["id", "name", "nums", "scores"]
    # The official client reads what Spark wrote, with the registered schema.
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        definition = json.loads(info["data"])
        reader = client.create_reader(topic, pulsar.MessageId.earliest, schema=AvroSchema(None, definition)) \
            if kind == "avro" else client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(20_000) for _ in range(20)]
        values = [m.value() if kind == "avro" else json.loads(m.data()) for m in got]
        assert sorted((v["id"], v["name"], v["nums"], v["scores"]) for v in values) == sorted(
            (i, f"name-{i}", [i, i + 1], {"a": float(i)}) for i in range(20))
    finally:
        client.close()
    # ... and so does Spark, expanding it back into columns.
    back = magnetar_format(stream=False, topic=topic, expandSchema="true").collect()
    assert sorted((r.id, r.name, r["__key"]) for r in back) == sorted((i, f"name-{i}", f"k{i}") for i in range(20))


def test_sink_value_schema_needs_a_struct(spark, standalone, topic):
    frame = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match="needs a struct 'value' column"):
        (frame.write.format("magnetar").option("service.url", standalone.service_url).option("topic", topic)
         .option("valueSchema", "avro").mode("append").save())
    with pytest.raises(Exception, match="must be avro or json"):
        (frame.write.format("magnetar").option("service.url", standalone.service_url).option("topic", topic)
         .option("valueSchema", "xml").mode("append").save())
