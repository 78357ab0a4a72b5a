"""Compatibility rules from tables: Avro resolution (reader vs writer) and Pulsar's strategies over a history."""

from __future__ import annotations

import json

import pytest

from broker.errors import IncompatibleSchemaError
from broker.schemas import InvalidSchemaError, SchemaInfo
from broker.schemas.compatibility import Strategy, can_read, check_compatible, parse_avro, parse_strategy


def record(*fields, name="R", **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def avro(schema) -> SchemaInfo:
    return SchemaInfo("AVRO", json.dumps(schema).encode())


ENUM_AB = {"type": "enum", "name": "Color", "symbols": ["A", "B"]}
ENUM_ABC = {"type": "enum", "name": "Color", "symbols": ["A", "B", "C"]}

# (case, reader, writer, reader can read writer's data)
RESOLUTION = [
    ("identical", record(f("a", "int")), record(f("a", "int")), True),
    ("reader adds a field with a default", record(f("a", "int"), f("b", "string", default="x")),
     record(f("a", "int")), True),
    ("reader adds a field without a default", record(f("a", "int"), f("b", "string")), record(f("a", "int")), False),
    ("reader adds a nullable field without a default", record(f("a", "int"), f("b", ["null", "string"])),
     record(f("a", "int")), False),
    ("reader adds a nullable field with a null default", record(f("a", "int"), f("b", ["null", "string"], default=None)),
     record(f("a", "int")), True),
    ("reader drops a field (no default needed)", record(f("a", "int")), record(f("a", "int"), f("b", "string")), True),
    ("int promotes to long", record(f("a", "long")), record(f("a", "int")), True),
    ("int promotes to double", record(f("a", "double")), record(f("a", "int")), True),
    ("long promotes to float", record(f("a", "float")), record(f("a", "long")), True),
    ("float promotes to double", record(f("a", "double")), record(f("a", "float")), True),
    ("long does not narrow to int", record(f("a", "int")), record(f("a", "long")), False),
    ("double does not narrow to float", record(f("a", "float")), record(f("a", "double")), False),
    ("string reads bytes", record(f("a", "string")), record(f("a", "bytes")), True),
    ("bytes reads string", record(f("a", "bytes")), record(f("a", "string")), True),
    ("int is not a string", record(f("a", "string")), record(f("a", "int")), False),
    ("renamed field with an alias", record(f("b", "int", aliases=["a"])), record(f("a", "int")), True),
    ("renamed field without an alias", record(f("b", "int")), record(f("a", "int")), False),
    ("enum gains a symbol", record(f("c", ENUM_ABC)), record(f("c", ENUM_AB)), True),
    ("enum loses a symbol the writer has", record(f("c", ENUM_AB)), record(f("c", ENUM_ABC)), False),
    ("enum loses a symbol but has a default", record(f("c", {**ENUM_AB, "default": "A"})), record(f("c", ENUM_ABC)),
     True),
    ("nested record renamed", record(f("n", record(f("x", "int"), name="Inner"))),
     record(f("n", record(f("x", "int"), name="Other"))), False),
    ("nested record renamed with an alias", record(f("n", record(f("x", "int"), name="Inner", aliases=["Other"]))),
     record(f("n", record(f("x", "int"), name="Other"))), True),
    ("top-level record name is free", record(f("a", "int"), name="User2"), record(f("a", "int"), name="User1"), True),
    ("reader union reads a plain writer", record(f("a", ["null", "int"])), record(f("a", "int")), True),
    ("plain reader cannot read a writer union with null", record(f("a", "int")), record(f("a", ["null", "int"])),
     False),
    ("union widens by promotion", record(f("a", ["null", "long"])), record(f("a", ["null", "int"])), True),
    ("array items promote", record(f("a", {"type": "array", "items": "long"})),
     record(f("a", {"type": "array", "items": "int"})), True),
    ("map values change type", record(f("a", {"type": "map", "values": "int"})),
     record(f("a", {"type": "map", "values": "string"})), False),
    ("fixed size changes", record(f("a", {"type": "fixed", "name": "F", "size": 4})),
     record(f("a", {"type": "fixed", "name": "F", "size": 8})), False),
    ("logical type reads as its base type", record(f("d", {"type": "int", "logicalType": "date"})),
     record(f("d", "int")), True),
    ("recursive type", record(f("v", "int"), f("next", ["null", "R"])), record(f("v", "int"), f("next", ["null", "R"])),
     True),
    ("named reference resolves", record(f("c", ENUM_ABC), f("d", "Color")), record(f("c", ENUM_AB), f("d", "Color")),
     True),
]


@pytest.mark.parametrize("case,reader,writer,ok", RESOLUTION, ids=[c[0] for c in RESOLUTION])
def test_avro_resolution(case, reader, writer, ok):
    problems = can_read(parse_avro(json.dumps(reader).encode()), parse_avro(json.dumps(writer).encode()))
    assert (not problems) == ok, problems


V1 = record(f("a", "int"))
V2_DEFAULTED = record(f("a", "int"), f("b", "string", default=""))  # BACKWARD and FORWARD from V1
V2_REQUIRED = record(f("a", "int"), f("b", "string"))  # FORWARD only from V1 (old readers skip b)
V3_DROPS_A = record(f("b", "string", default=""))  # from V2_*: BACKWARD (a skipped); FORWARD fails (a needed)

# (strategy, history, new, compatible)
STRATEGIES = [
    (Strategy.BACKWARD, [V1], V2_DEFAULTED, True),
    (Strategy.BACKWARD, [V1], V2_REQUIRED, False),
    (Strategy.FORWARD, [V1], V2_REQUIRED, True),
    (Strategy.FORWARD, [V1, V2_REQUIRED], V3_DROPS_A, False),
    (Strategy.FULL, [V1], V2_DEFAULTED, True),
    (Strategy.FULL, [V1], V2_REQUIRED, False),
    (Strategy.ALWAYS_COMPATIBLE, [V1], record(f("a", "string")), True),
    (Strategy.ALWAYS_INCOMPATIBLE, [V1], V2_DEFAULTED, False),
    # Non-transitive strategies check the latest only; transitive ones the whole history.
    (Strategy.BACKWARD, [V1, V2_DEFAULTED], V3_DROPS_A, True),
    (Strategy.BACKWARD_TRANSITIVE, [V2_REQUIRED, V2_DEFAULTED], V2_DEFAULTED, True),
    (Strategy.BACKWARD, [record(f("a", "string")), V1], record(f("a", "long")), True),
    (Strategy.BACKWARD_TRANSITIVE, [record(f("a", "string")), V1], record(f("a", "long")), False),
    (Strategy.FORWARD_TRANSITIVE, [record(f("a", "long")), V1], record(f("a", "int")), True),
    (Strategy.FORWARD_TRANSITIVE, [record(f("a", "int")), record(f("a", "long"))], record(f("a", "long")), False),
    (Strategy.FULL_TRANSITIVE, [V1, V2_DEFAULTED], V2_DEFAULTED, True),
    (Strategy.FULL, [record(f("a", "string")), V1], V2_DEFAULTED, True),
    (Strategy.FULL_TRANSITIVE, [record(f("a", "string")), V1], V2_DEFAULTED, False),
]


@pytest.mark.parametrize("strategy,history,new,ok", STRATEGIES)
def test_strategies(strategy, history, new, ok):
    if ok:
        check_compatible(strategy, [avro(h) for h in history], avro(new))
    else:
        with pytest.raises(IncompatibleSchemaError):
            check_compatible(strategy, [avro(h) for h in history], avro(new))


# Primitive and KEY_VALUE schemas compare by type.
BY_TYPE = [
    (SchemaInfo("STRING"), SchemaInfo("STRING"), True),
    (SchemaInfo("STRING"), SchemaInfo("INT64"), False),
    (SchemaInfo("INT64"), avro(V1), False),
    (avro(V1), SchemaInfo("JSON", json.dumps(V1).encode()), False),
    (SchemaInfo("KEY_VALUE", b"", {"key.schema.type": "STRING", "value.schema.type": "JSON"}),
     SchemaInfo("KEY_VALUE", b"x", {"key.schema.type": "STRING", "value.schema.type": "JSON"}), True),
    (SchemaInfo("KEY_VALUE", b"", {"key.schema.type": "STRING", "value.schema.type": "JSON"}),
     SchemaInfo("KEY_VALUE", b"", {"key.schema.type": "INT32", "value.schema.type": "JSON"}), False),
    (SchemaInfo("JSON", json.dumps(V1).encode()), SchemaInfo("JSON", json.dumps(V2_DEFAULTED).encode()), True),
    (SchemaInfo("JSON", json.dumps(V1).encode()), SchemaInfo("JSON", json.dumps(V2_REQUIRED).encode()), False),
]


@pytest.mark.parametrize("existing,new,ok", BY_TYPE)
def test_by_type_under_backward(existing, new, ok):
    if ok:
        check_compatible(Strategy.BACKWARD, [existing], new)
    else:
        with pytest.raises(IncompatibleSchemaError):
            check_compatible(Strategy.BACKWARD, [existing], new)


def test_no_history_accepts_anything():
    check_compatible(Strategy.ALWAYS_INCOMPATIBLE, [], avro(V1))


@pytest.mark.parametrize("text,expected", [
    ("BACKWARD", Strategy.BACKWARD), ("full_transitive", Strategy.FULL_TRANSITIVE), ("UNDEFINED", None),
    ("BackwardTransitive", Strategy.BACKWARD_TRANSITIVE), ("AutoUpdateDisabled", Strategy.ALWAYS_INCOMPATIBLE),
])
def test_parse_strategy(text, expected):
    assert parse_strategy(text) is expected


@pytest.mark.parametrize("text", ["SIDEWAYS", "", 3, None])
def test_parse_strategy_refuses_unknown(text):
    with pytest.raises(InvalidSchemaError):
        parse_strategy(text)


@pytest.mark.parametrize("data", [b"not json", b'{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}',
                                  b'{"type": "record"}'])
def test_invalid_definition(data):
    with pytest.raises(InvalidSchemaError):
        parse_avro(data)
