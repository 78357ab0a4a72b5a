"""The schema registry through the official `pulsar-client` and the admin REST, on a real `broker standalone`."""

from __future__ import annotations

import io
import json

import _pulsar
import fastavro
import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from tests.official_client.support import admin_call as call, receive_n

V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}
V1_DEFAULTED = {"type": "record", "name": "Order",
                "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string", "default": ""}]}
V1_REQUIRED = {"type": "record", "name": "Order",
               "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string"}]}
V_ID_STRING = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


class Example(Record):
    a = Integer()
    b = Integer()


def _path(topic: str) -> str:
    return "/admin/v2/schemas/" + topic.removeprefix("persistent://")


def _avro_payload(schema: dict) -> dict:
    return {"type": "AVRO", "schema": json.dumps(schema), "properties": {}}


def test_avro_round_trip_with_schema_version(client, topic):
    producer = client.create_producer(topic, schema=AvroSchema(Example))
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Example))
    producer.send(Example(a=1, b=2))
    msg = receive_n(consumer, 1)[0]
    assert msg.value() == Example(a=1, b=2)
    assert msg.schema_version().encode() == b"\x00" * 8  # version 0, Pulsar's 8-byte big-endian form


def test_incompatible_producer_is_refused_and_the_schema_is_unchanged(standalone, client, topic):
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_REQUIRED))
    status, body = call(standalone, "GET", _path(topic) + "/schema")
    assert status == 200 and body["version"] == 0 and json.loads(body["data"]) == V0
    assert call(standalone, "GET", _path(topic) + "/versions")[1] == [0]

    evolved = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_DEFAULTED))
    status, body = call(standalone, "GET", _path(topic) + "/schema")
    assert status == 200 and body["version"] == 1 and json.loads(body["data"]) == V1_DEFAULTED
    evolved.send({"id": 7, "note": "v1"})
    # A producer with the first schema again is given its version, not a new one.
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
    assert call(standalone, "GET", _path(topic) + "/versions")[1] == [0, 1]


def test_incompatible_consumers_are_refused(client, topic):
    class BadExample(Record):
        a = String()
        b = Integer()

    client.create_producer(topic, schema=AvroSchema(Example))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "bad-field", schema=AvroSchema(BadExample))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "bad-type", schema=JsonSchema(Example))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())
    client.subscribe(topic, "good", schema=AvroSchema(Example))


def test_auto_consume_resolves_each_message_by_its_schema_version(standalone, client, topic):
    """A schema-less consumer decodes by asking GET_SCHEMA for each message's version (Java's AUTO_CONSUME)."""
    assert call(standalone, "POST", _path(topic) + "/schema", _avro_payload(V0))[1] == {"version": 0}
    consumer = client.subscribe(topic, "auto")
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0)).send({"id": 1})
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_DEFAULTED)).send({"id": 2, "note": "x"})
    decoded = []
    for msg in receive_n(consumer, 2):
        version = int.from_bytes(msg.schema_version().encode(), "big")
        info = client._client.get_schema_info(topic, version)
        assert info.schema_type() == _pulsar.SchemaType.AVRO
        writer = json.loads(info.schema())
        decoded.append((version, fastavro.schemaless_reader(io.BytesIO(msg.data()), writer, None)))
    assert decoded == [(0, {"id": 1}), (1, {"id": 2, "note": "x"})]
    with pytest.raises(Exception, match="TopicNotFound"):
        client._client.get_schema_info(topic, 7)


def test_forward_strategy_and_readers_decode_both_versions(standalone, client, topic):
    """Like the conformance suite's schema-evolve case: a FORWARD namespace, a new producer whose field became
    required, and old-schema consumers and readers decoding both producers' messages."""
    assert call(standalone, "PUT", "/admin/v2/namespaces/public/forward-ns", {})[0] == 204
    status, _ = call(standalone, "PUT", "/admin/v2/namespaces/public/forward-ns/schemaCompatibilityStrategy", "FORWARD")
    assert status == 204
    assert call(standalone, "GET", "/admin/v2/namespaces/public/forward-ns/schemaCompatibilityStrategy")[1] == "FORWARD"

    class User1(Record):
        name = String()
        age = Integer()

    class User2(Record):
        _sorted_fields = True
        name = String()
        age = Integer(required=True)

    t = topic.replace("public/default", "public/forward-ns")
    producer1 = client.create_producer(t, schema=AvroSchema(User1))
    consumer = client.subscribe(t, "sub", schema=AvroSchema(User1))
    reader = client.create_reader(t, schema=AvroSchema(User1), start_message_id=pulsar.MessageId.earliest)
    producer2 = client.create_producer(t, schema=AvroSchema(User2))
    for i in range(3):
        producer1.send(User1(age=i + 100, name=f"User1 {i}"))
        producer2.send(User2(age=i + 200, name=f"User2 {i}"))
    expected = [(f"User{1 + j % 2} {j // 2}", j // 2 + (100 if j % 2 == 0 else 200)) for j in range(6)]
    assert [(m.value().name, m.value().age) for m in receive_n(consumer, 6)] == expected
    assert [(m.value().name, m.value().age) for m in (reader.read_next(10_000) for _ in range(6))] == expected


def test_rest_routes_return_test_and_delete_schemas(standalone, topic):
    path = _path(topic)
    assert call(standalone, "GET", path + "/schema")[0] == 404
    assert call(standalone, "POST", path + "/schema", _avro_payload(V0)) == (200, {"version": 0})
    status, dry = call(standalone, "POST", path + "/compatibility", _avro_payload(V1_REQUIRED))
    assert status == 200 and dry["isCompatibility"] is False and dry["schemaCompatibilityStrategy"] == "BACKWARD"
    assert call(standalone, "POST", path + "/compatibility", _avro_payload(V1_DEFAULTED))[1]["isCompatibility"] is True
    assert call(standalone, "GET", path + "/versions")[1] == [0]  # the dry runs stored nothing
    status, body = call(standalone, "POST", path + "/schema", _avro_payload(V1_REQUIRED))
    assert status == 409 and "cannot read" in body["reason"]
    assert call(standalone, "POST", path + "/schema", _avro_payload(V1_DEFAULTED)) == (200, {"version": 1})
    status, v0 = call(standalone, "GET", path + "/schema/0")
    assert status == 200 and v0["type"] == "AVRO" and json.loads(v0["data"]) == V0
    assert [s["version"] for s in call(standalone, "GET", path + "/schemas")[1]["getSchemaResponses"]] == [0, 1]
    assert call(standalone, "POST", path + "/version", _avro_payload(V0)) == (200, {"version": 0})

    assert call(standalone, "DELETE", path + "/schema") == (200, {"version": 2})
    assert call(standalone, "GET", path + "/schema")[0] == 404
    assert call(standalone, "GET", path + "/versions")[1] == []
    # After a delete any schema may start again; the numbering goes on.
    assert call(standalone, "POST", path + "/schema", {"type": "STRING", "schema": ""}) == (200, {"version": 3})
    # A forced delete erases the history but never reuses a number: a message stamped with an erased version
    # cannot be mistaken for a new one.
    assert call(standalone, "DELETE", path + "/schema?force=true") == (200, {"version": 4})
    assert call(standalone, "GET", path + "/schema/0")[0] == 404
    assert call(standalone, "POST", path + "/schema", _avro_payload(V0)) == (200, {"version": 5})
    assert call(standalone, "GET", path + "/versions")[1] == [5]


@pytest.mark.parametrize("body,status", [
    ({"type": "AVRO", "schema": "not json"}, 422),
    ({"type": "AVRO", "schema": '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}'}, 422),
    ({"type": "WHATEVER", "schema": ""}, 422),
    ({"type": "AVRO", "schema": "x" * (300 * 1024)}, 422),
    ({"type": "STRING", "schema": "", "properties": {str(i): "v" for i in range(100)}}, 422),
    (["not", "an", "object"], 400),
])
def test_rest_refuses_bad_schemas(standalone, topic, body, status):
    got, reply = call(standalone, "POST", _path(topic) + "/schema", body)
    assert got == status and reply["reason"]
    assert call(standalone, "GET", _path(topic) + "/versions")[1] == []


def test_partitions_share_their_parents_schema(standalone, client, topic):
    assert call(standalone, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 3)[0] == 204
    producer = client.create_producer(topic, schema=AvroSchema(Example))  # registers once, for all partitions
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Example))
    for i in range(6):
        producer.send(Example(a=i, b=i), partition_key=str(i))
    assert sorted(m.value().a for m in receive_n(consumer, 6)) == list(range(6))
    assert call(standalone, "GET", _path(topic) + "/versions")[1] == [0]
    assert call(standalone, "GET", _path(topic + "-partition-1") + "/schema")[1]["version"] == 0


def test_auto_update_off_allows_known_schemas_only(standalone, client):
    ns = "public/no-auto-update"
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}", {})[0] == 204
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", False)[0] == 204
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema")[1] is False
    topic = f"persistent://{ns}/t"
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))  # the first schema may be set
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_DEFAULTED))
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
    # An admin may still evolve it.
    assert call(standalone, "POST", _path(topic) + "/schema", _avro_payload(V1_DEFAULTED)) == (200, {"version": 1})
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_DEFAULTED))


def test_schema_validation_enforced_refuses_schemaless_producers(standalone, client):
    ns = "public/enforced"
    assert call(standalone, "PUT", f"/admin/v2/namespaces/{ns}", {})[0] == 204
    client.create_producer(f"persistent://{ns}/before")  # off: schema-less producers are welcome
    assert call(standalone, "POST", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced", True)[0] == 204
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced")[1] is True
    typed = f"persistent://{ns}/typed"
    client.create_producer(typed, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(typed)
    client.create_producer(f"persistent://{ns}/untyped")  # no schema on the topic: nothing to enforce


def test_strategy_policy_refuses_unknown_names(standalone):
    status, body = call(standalone, "PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "SIDEWAYS")
    assert status == 422 and "SIDEWAYS" in body["reason"]
    assert call(standalone, "POST", "/admin/v2/namespaces/public/default/isAllowAutoUpdateSchema", "yes")[0] == 400


def test_schemas_survive_a_restart(start_standalone):
    broker = start_standalone()
    topic = "persistent://public/default/survivor"
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        c.create_producer(topic, schema=AvroSchema(None, schema_definition=V0)).send({"id": 1})
        c.create_producer(topic, schema=AvroSchema(None, schema_definition=V1_DEFAULTED)).send({"id": 2, "note": "n"})
    finally:
        c.close()
    broker.restart(timeout_s=60)
    assert call(broker, "GET", _path(topic) + "/versions")[1] == [0, 1]
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        with pytest.raises(pulsar.IncompatibleSchema):  # still checked against the stored history
            c.create_producer(topic, schema=AvroSchema(None, schema_definition=V_ID_STRING))
        reader = c.create_reader(topic, pulsar.MessageId.earliest, schema=AvroSchema(None, schema_definition=V1_DEFAULTED))
        assert [reader.read_next(10_000).value() for _ in range(2)] == [{"id": 1, "note": ""}, {"id": 2, "note": "n"}]
    finally:
        c.close()


def test_deleting_a_topic_deletes_its_schema(standalone, client, topic):
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0)).close()
    assert call(standalone, "DELETE", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}")[0] == 204
    assert call(standalone, "GET", _path(topic) + "/schema")[0] == 404
    client.create_producer(topic, schema=AvroSchema(None, schema_definition=V_ID_STRING))  # a fresh start

    partitioned = topic + "-p"
    assert call(standalone, "PUT", f"/admin/v2/persistent/{partitioned.removeprefix('persistent://')}/partitions", 2)[0] == 204
    client.create_producer(partitioned, schema=AvroSchema(None, schema_definition=V0)).close()
    assert call(standalone, "DELETE", f"/admin/v2/persistent/{partitioned.removeprefix('persistent://')}/partitions")[0] == 204
    assert call(standalone, "GET", _path(partitioned) + "/schema")[0] == 404


def test_a_consumer_on_an_idle_topic_sets_its_schema(standalone, client, topic):
    consumer = client.subscribe(topic, "first", schema=AvroSchema(Example))
    assert call(standalone, "GET", _path(topic) + "/versions")[1] == [0]
    producer = client.create_producer(topic, schema=AvroSchema(Example))
    producer.send(Example(a=5, b=6))
    assert receive_n(consumer, 1)[0].value() == Example(a=5, b=6)
    busy = topic + "-busy"
    client.create_producer(busy).send(b"schema-less data")
    client.subscribe(busy, "typed", schema=AvroSchema(Example))  # not idle: checked (nothing to check), not stored
    assert call(standalone, "GET", _path(busy) + "/versions")[1] == []
