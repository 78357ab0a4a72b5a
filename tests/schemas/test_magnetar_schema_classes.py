"""magnetar.schema against pulsar.schema, without a broker: the same declarations give the same Avro schema and the
same bytes, and each decodes the other's; plus the magnetar classes' own checks."""

from __future__ import annotations

import enum
import json

import pulsar.schema as ps
import pytest

import magnetar.schema as ms


class Color(enum.Enum):
    red = 1
    blue = 2


def declare(s):
    """One set of record classes declared with module ``s`` (pulsar.schema or magnetar.schema)."""

    class Inner(s.Record):
        x = s.Integer()
        label = s.String(default="none", required_default=True)

    class Everything(s.Record):
        _sorted_fields = True
        n = s.Null()
        flag = s.Boolean()
        small = s.Integer(required=True)
        big = s.Long()
        f = s.Float()
        d = s.Double()
        raw = s.Bytes()
        text = s.String()
        color = s.CustomEnum(Color)
        items = s.Array(s.String())
        scores = s.Map(s.Double())
        inner = Inner()
        inners = s.Array(Inner())

    return Everything, Inner


def build(s):
    Everything, Inner = declare(s)
    return Everything(flag=True, small=3, big=2**40, f=1.5, d=2.25, raw=b"\x00\x01", text="héllo", color=Color.blue,
                      items=["a", "b"], scores={"k": 1.0}, inner=Inner(x=1), inners=[Inner(x=2, label="l")])


def test_same_declarations_give_the_same_avro_schema():
    assert declare(ms)[0].schema() == declare(ps)[0].schema()


def test_avro_bytes_are_identical_and_each_decodes_the_other():
    official, ours = build(ps), build(ms)
    official_bytes = ps.AvroSchema(type(official)).encode(official)
    our_bytes = ms.AvroSchema(type(ours)).encode(ours)
    assert our_bytes == official_bytes
    back = ms.AvroSchema(type(ours)).decode(official_bytes)
    assert back == ours and back.inners[0].label == "l" and back.color is Color.blue
    assert ps.AvroSchema(type(official)).decode(our_bytes) == official


def test_json_each_decodes_the_other():
    official, ours = build(ps), build(ms)
    as_json = ms.JsonSchema(type(ours)).encode(ours)
    assert json.loads(as_json)["text"] == "héllo"
    official_json_schema = ps.JsonSchema(type(official))
    assert official_json_schema.schema_info().schema() and ms.JsonSchema(type(ours)).schema_info().schema()
    decoded = ms.JsonSchema(type(ours)).decode(as_json)
    assert (decoded.small, decoded.color, decoded.inner.x, decoded.scores) == (3, Color.blue, 1, {"k": 1.0})


def test_defaults_and_equality():
    Everything, Inner = declare(ms)
    e = Everything(small=1)
    assert (e.flag, e.big, e.text, e.inner, e.items) == (False, None, None, None, None)
    assert Inner().label == "none"
    assert Inner(x=1) == Inner(x=1) and Inner(x=1) != Inner(x=2)


@pytest.mark.parametrize("field,value", [("small", "3"), ("small", 2**40), ("flag", 1), ("text", 5),
                                         ("color", "green"), ("items", "abc"), ("scores", {1: 2.0}),
                                         ("inner", 5), ("n", 1), ("small", None)])
def test_wrong_values_are_refused_naming_the_field(field, value):
    Everything, _ = declare(ms)
    with pytest.raises((TypeError, ValueError), match=field):
        Everything(small=1, **{field: value})


def test_undeclared_fields_are_refused():
    _, Inner = declare(ms)
    with pytest.raises(AttributeError):
        Inner(y=1)
    with pytest.raises(AttributeError):
        Inner().y = 1


def test_schemas_refuse_what_they_cannot_encode():
    Everything, Inner = declare(ms)
    with pytest.raises(TypeError):
        ms.AvroSchema(Everything).encode(Inner(x=1))
    with pytest.raises(TypeError):
        ms.StringSchema().encode(b"bytes")
    with pytest.raises(TypeError):
        ms.BytesSchema().encode("text")
    with pytest.raises(TypeError):
        ms.KeyValueSchema(ms.StringSchema(), ms.StringSchema()).encode("not a pair")


def test_key_value_round_trip_and_malformed_payloads():
    Inner = declare(ms)[1]
    kv = ms.KeyValueSchema(ms.StringSchema(), ms.AvroSchema(Inner))
    data = kv.encode(("key", Inner(x=7)))
    assert kv.decode(data) == ms.KeyValue("key", Inner(x=7))
    info = kv.schema_info()
    assert info.schema_type() is ms.SchemaType.KEY_VALUE and info.properties()["value.schema.type"] == "AVRO"
    with pytest.raises(ValueError):
        kv.decode(data + b"extra")


def test_bytes_schema_declares_nothing_on_the_wire():
    assert ms.BytesSchema().schema_info().to_proto() is None
    assert ms.StringSchema().schema_info().to_proto().type == 1


def test_writer_schema_cache_is_bounded():
    cache = ms.WriterSchemas(capacity=2)
    for v in range(3):
        cache.put("t", v, ms.SchemaInfo(ms.SchemaType.AVRO, b"{}"))
    assert cache.get("t", 0) is None and cache.get("t", 2) is not None
