"""Schema'd producers and consumers with each client (``pulsar`` and ``magnetar``, same code) and across them."""

from __future__ import annotations

import enum
import functools
import importlib

import pulsar
import pytest

import magnetar
from tests.official_client.support import admin_call as call, receive_n

V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}
V1 = {"type": "record", "name": "Order",
      "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string", "default": ""}]}
V1_REQUIRED = {"type": "record", "name": "Order",
               "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string"}]}


def schema_module(api):
    return importlib.import_module(f"{api.__name__}.schema")


@functools.cache
def records(api):
    """The same record classes declared with ``api``'s schema module (the code is identical for both)."""
    s = schema_module(api)

    class Color(enum.Enum):
        red = 1
        blue = 2

    class Line(s.Record):
        sku = s.String()
        qty = s.Integer()

    class Sale(s.Record):
        id = s.Long()
        price = s.Double()
        paid = s.Boolean()
        color = s.CustomEnum(Color)
        tags = s.Array(s.String())
        extras = s.Map(s.String())
        line = Line()

    return s, Sale, Line, Color


def sale(api, i: int):
    s, Sale, Line, Color = records(api)
    return Sale(id=i, price=1.5 * i, paid=i % 2 == 0, color=Color.blue, tags=["a", str(i)], extras={"k": "v"},
                line=Line(sku=f"sku-{i}", qty=i))


def as_tuple(value) -> tuple:
    return (value.id, value.price, value.paid, value.color.name, value.tags, value.extras, value.line.sku, value.line.qty)


@pytest.mark.parametrize("kind", ["AvroSchema", "JsonSchema"])
def test_round_trip(any_client, api, topic, kind):
    s, Sale, _, _ = records(api)
    schema = getattr(s, kind)(Sale)
    consumer = any_client.subscribe(topic, "s", schema=schema)
    producer = any_client.create_producer(topic, schema=getattr(s, kind)(Sale))
    sent = [sale(api, i) for i in range(5)]
    for value in sent:
        producer.send(value)
    got = [m.value() for m in receive_n(consumer, 5)]
    assert [as_tuple(v) for v in got] == [as_tuple(v) for v in sent]
    assert got == sent


def test_string_and_bytes_schemas(any_client, api, topic):
    s = schema_module(api)
    consumer = any_client.subscribe(topic, "s", schema=s.StringSchema())
    any_client.create_producer(topic, schema=s.StringSchema()).send("héllo")
    msg = receive_n(consumer, 1)[0]
    assert msg.value() == "héllo" and msg.data() == "héllo".encode()
    raw = topic + "-raw"
    consumer = any_client.subscribe(raw, "s", schema=s.BytesSchema())
    any_client.create_producer(raw, schema=s.BytesSchema()).send(b"\x00bytes")
    assert receive_n(consumer, 1)[0].value() == b"\x00bytes"


@pytest.mark.parametrize("kind", ["AvroSchema", "JsonSchema"])
@pytest.mark.parametrize("producer_api,consumer_api", [("pulsar", "magnetar"), ("magnetar", "pulsar")])
def test_records_across_clients(standalone, topic, producer_api, consumer_api, kind):
    """Records written by one client are read by the other, under one schema version."""
    apis = {name: importlib.import_module(name) for name in (producer_api, consumer_api)}
    clients = {name: mod.Client(standalone.service_url, operation_timeout_seconds=15) for name, mod in apis.items()}
    try:
        cs, CSale, _, _ = records(apis[consumer_api])
        ps, PSale, _, _ = records(apis[producer_api])
        consumer = clients[consumer_api].subscribe(topic, "s", schema=getattr(cs, kind)(CSale))
        producer = clients[producer_api].create_producer(topic, schema=getattr(ps, kind)(PSale))
        for i in range(3):
            producer.send(sale(apis[producer_api], i))
        msgs = receive_n(consumer, 3)
        assert [as_tuple(m.value()) for m in msgs] == [as_tuple(sale(apis[producer_api], i)) for i in range(3)]
        assert {m.schema_version().encode() for m in msgs} == {b"\x00" * 8}
        assert call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/versions")[1] == [0]
    finally:
        for c in clients.values():
            c.close()


def test_incompatible_producer_refused_then_compatible_evolution(standalone, any_client, api, topic):
    s = schema_module(api)
    old_consumer = any_client.subscribe(topic, "old", schema=s.AvroSchema(None, schema_definition=V0))
    any_client.create_producer(topic, schema=s.AvroSchema(None, schema_definition=V0)).send({"id": 1})
    with pytest.raises(api.IncompatibleSchema):
        any_client.create_producer(topic, schema=s.AvroSchema(None, schema_definition=V1_REQUIRED))
    path = f"/admin/v2/schemas/{topic.removeprefix('persistent://')}"
    assert call(standalone, "GET", path + "/versions")[1] == [0]

    evolved = any_client.create_producer(topic, schema=s.AvroSchema(None, schema_definition=V1))
    evolved.send({"id": 2, "note": "new"})
    assert call(standalone, "GET", path + "/schema")[1]["version"] == 1
    msgs = receive_n(old_consumer, 2)
    # The old consumer reads both: the v1 message is resolved from its writer schema (fetched by version).
    assert [m.value() for m in msgs] == [{"id": 1}, {"id": 2}]
    assert [int.from_bytes(m.schema_version().encode("latin-1"), "big") for m in msgs] == [0, 1]
    new_reader = any_client.create_reader(topic, api.MessageId.earliest, schema=s.AvroSchema(None, schema_definition=V1))
    assert [new_reader.read_next(10_000).value() for _ in range(2)] == [{"id": 1, "note": ""}, {"id": 2, "note": "new"}]


def test_magnetar_get_schema_info_by_version(standalone, topic):
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        from magnetar.schema import AvroSchema, SchemaType

        c.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
        c.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
        first, latest = c.get_schema_info(topic, 0), c.get_schema_info(topic)
        assert first.schema_type() is SchemaType.AVRO and "note" not in first.schema() and "note" in latest.schema()
        with pytest.raises(magnetar.TopicNotFound):
            c.get_schema_info(topic, 5)
    finally:
        c.close()


def test_magnetar_key_value_schema(standalone, topic):
    from magnetar.schema import Integer, JsonSchema, KeyValueSchema, Record, StringSchema

    class Point(Record):
        x = Integer()
        y = Integer()

    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        schema = KeyValueSchema(StringSchema(), JsonSchema(Point))
        consumer = c.subscribe(topic, "s", schema=schema)
        c.create_producer(topic, schema=KeyValueSchema(StringSchema(), JsonSchema(Point))).send(("p1", Point(x=1, y=2)))
        value = receive_n(consumer, 1)[0].value()
        assert value.key == "p1" and value.value == Point(x=1, y=2)
        info = call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/schema")[1]
        assert info["type"] == "KEY_VALUE" and info["properties"]["value.schema.type"] == "JSON"
        with pytest.raises(magnetar.IncompatibleSchema):  # KEY_VALUE compares its key and value types
            c.create_producer(topic, schema=KeyValueSchema(JsonSchema(Point), JsonSchema(Point)))
    finally:
        c.close()


def test_wrong_value_types_fail_at_send(any_client, api, topic):
    s, Sale, Line, _ = records(api)
    producer = any_client.create_producer(topic, schema=s.AvroSchema(Sale))
    with pytest.raises((TypeError, ValueError)):
        producer.send(Line(sku="x", qty=1))
    with pytest.raises((TypeError, ValueError)):
        producer.send(b"raw bytes")


def test_official_and_magnetar_records_declare_the_same_schema():
    for build in (lambda api: records(api)[1].schema(),):
        assert build(pulsar) == build(magnetar)


def test_partitioned_topic_round_trip(standalone, any_client, api, topic):
    assert call(standalone, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 3)[0] == 204
    s, Sale, _, _ = records(api)
    consumer = any_client.subscribe(topic, "s", schema=s.AvroSchema(Sale))
    producer = any_client.create_producer(topic, schema=s.AvroSchema(Sale))
    for i in range(9):
        producer.send(sale(api, i), partition_key=f"k{i}")
    assert sorted(m.value().id for m in receive_n(consumer, 9)) == list(range(9))
    assert call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/versions")[1] == [0]
