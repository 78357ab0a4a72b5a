"""Schemas: how a producer encodes values and a consumer decodes them, and the SchemaInfo the broker registers.

``BytesSchema`` (the default) sends no schema, as the official clients do.
``StringSchema`` is UTF-8. ``JsonSchema(Record)`` and ``AvroSchema(Record)``
register the record's Avro schema (JSON schemas carry an Avro-style definition,
as in Pulsar) and encode a record as JSON text or Avro binary (fastavro).
An Avro consumer decodes each message with the schema it was *written* with,
found by the message's schema version (GET_SCHEMA, cached), resolved against
its own schema by Avro's rules; so a consumer on an old schema reads what newer
producers wrote. ``KeyValueSchema(key, value)`` packs a key and a value in one
payload (Pulsar's INLINE encoding: each part prefixed by its 4-byte length).
"""

from __future__ import annotations

import enum
import io
import json
import struct
from collections import OrderedDict
from typing import NamedTuple

import fastavro

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.schema.definition import Record


class SchemaType(enum.IntEnum):
    """Pulsar's schema types by their REST names; the value is the wire's ``Schema.Type`` (BYTES: none sent)."""

    BYTES = -1
    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    KEY_VALUE = 15
    PROTOBUF_NATIVE = 20


class SchemaInfo:
    """A schema as the broker keeps it: type, definition, name and properties."""

    def __init__(self, schema_type: SchemaType, definition: bytes | str, name: str = "", properties=None):
        self._type = SchemaType(schema_type)
        self._definition = definition.encode() if isinstance(definition, str) else bytes(definition)
        self._name, self._properties = name, dict(properties or {})

    def schema_type(self) -> SchemaType:
        return self._type

    def schema(self) -> str:
        return self._definition.decode("utf-8", "replace")

    def schema_bytes(self) -> bytes:
        return self._definition

    def name(self) -> str:
        return self._name

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def to_proto(self) -> pb.Schema | None:
        if self._type is SchemaType.BYTES:
            return None
        return pb.Schema(name=self._name, schema_data=self._definition, type=int(self._type),
                         properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(self._properties.items())])

    @classmethod
    def from_proto(cls, schema: pb.Schema) -> "SchemaInfo":
        try:
            kind = SchemaType(schema.type)
        except ValueError:
            kind = SchemaType.NONE
        return cls(kind, schema.schema_data, schema.name, {kv.key: kv.value for kv in schema.properties})

    def __repr__(self):
        return f"SchemaInfo({self._type.name}, {self.schema()[:80]!r})"


class Schema:
    """The base: subclasses define encode/decode. ``needs_writer_schema`` asks the consumer to look up the schema
    each message was written with (``decode_with`` then gets it)."""

    needs_writer_schema = False

    def __init__(self, record_cls, schema_type: SchemaType, schema_definition, schema_name: str, properties=None):
        self._record_cls = record_cls
        definition = schema_definition if isinstance(schema_definition, (str, bytes)) else \
            json.dumps(schema_definition, indent=None, separators=(",", ":"))
        self._info = SchemaInfo(schema_type, definition, schema_name, properties)

    def schema_info(self) -> SchemaInfo:
        return self._info

    def encode(self, obj) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes):
        raise NotImplementedError

    def decode_with(self, data: bytes, writer: SchemaInfo | None):
        return self.decode(data)

    def _validate_object_type(self, obj) -> None:
        if self._record_cls is not None and not isinstance(obj, self._record_cls):
            raise TypeError(f"{type(self).__name__} of {self._record_cls.__name__} cannot encode a "
                            f"{type(obj).__name__}")

    def __repr__(self):
        return f"{type(self).__name__}({self._info.schema_type().name})"


class BytesSchema(Schema):
    def __init__(self):
        super().__init__(None, SchemaType.BYTES, b"", "BYTES")

    def encode(self, obj) -> bytes:
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"BytesSchema encodes bytes, got {type(obj).__name__}")
        return bytes(obj)

    def decode(self, data: bytes):
        return data


class StringSchema(Schema):
    def __init__(self):
        super().__init__(None, SchemaType.STRING, b"", "String")

    def encode(self, obj) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"StringSchema encodes str, got {type(obj).__name__}")
        return obj.encode()

    def decode(self, data: bytes):
        return data.decode()


class JsonSchema(Schema):
    """Records as JSON text; the registered definition is the record's Avro schema (Pulsar's JSON schema). Like
    AvroSchema (and unlike pulsar.schema's), it also takes a definition and no record class, for dicts."""

    def __init__(self, record_cls, schema_definition: dict | None = None):
        if record_cls is None and schema_definition is None or record_cls is not None and not (
                isinstance(record_cls, type) and issubclass(record_cls, Record)):
            raise TypeError("JsonSchema needs a Record class (or a schema definition for dicts)")
        super().__init__(record_cls, SchemaType.JSON,
                         record_cls.schema() if record_cls is not None else schema_definition, "JSON")

    def encode(self, obj) -> bytes:
        if self._record_cls is None:
            if not isinstance(obj, dict):
                raise TypeError(f"a JsonSchema without a record class encodes dicts, got {type(obj).__name__}")
            return json.dumps(obj, separators=(",", ":"), default=str).encode()
        self._validate_object_type(obj)
        return json.dumps(obj.as_data(json_form=True), separators=(",", ":")).encode()

    def decode(self, data: bytes):
        value = json.loads(data)
        return value if self._record_cls is None else self._record_cls.from_dict(value)


class AvroSchema(Schema):
    """Records (or dicts, with ``schema_definition`` and no record class) as Avro binary through fastavro."""

    needs_writer_schema = True

    def __init__(self, record_cls, schema_definition: dict | None = None):
        if record_cls is None and schema_definition is None:
            raise ValueError("AvroSchema needs a Record class or a schema definition")
        definition = record_cls.schema() if record_cls is not None else schema_definition
        super().__init__(record_cls, SchemaType.AVRO, definition, "AVRO")
        self._definition = definition
        self._parsed = fastavro.parse_schema(definition)

    def encode(self, obj) -> bytes:
        if self._record_cls is not None:
            self._validate_object_type(obj)
            obj = obj.as_data()
        elif not isinstance(obj, dict):
            raise TypeError(f"an AvroSchema without a record class encodes dicts, got {type(obj).__name__}")
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._parsed, obj)
        return out.getvalue()

    def decode(self, data: bytes):
        return self._finish(fastavro.schemaless_reader(io.BytesIO(data), self._parsed, None))

    def decode_with(self, data: bytes, writer: SchemaInfo | None):
        if writer is None or writer.schema_type() is not SchemaType.AVRO:
            return self.decode(data)
        written = json.loads(writer.schema_bytes())
        if isinstance(written, dict) and isinstance(self._definition, dict) and "name" in self._definition:
            # Avro's resolution matches records by name; the top-level name is free (as the registry's check).
            written = {k: v for k, v in written.items() if k != "namespace"}
            written["name"] = self._definition["name"]
            if self._definition.get("namespace"):
                written["namespace"] = self._definition["namespace"]
        return self._finish(fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(written), self._parsed))

    def _finish(self, data):
        return self._record_cls.from_dict(data) if self._record_cls is not None else data


class KeyValue(NamedTuple):
    key: object
    value: object


class KeyValueSchema(Schema):
    """A key and a value in one payload, each with its own schema (Pulsar's KEY_VALUE, INLINE encoding)."""

    def __init__(self, key_schema: Schema, value_schema: Schema):
        self.key_schema, self.value_schema = key_schema, value_schema
        k, v = key_schema.schema_info(), value_schema.schema_info()
        definition = struct.pack(">i", len(k.schema_bytes())) + k.schema_bytes() + \
            struct.pack(">i", len(v.schema_bytes())) + v.schema_bytes()
        properties = {
            "key.schema.name": k.name(), "key.schema.type": k.schema_type().name,
            "key.schema.properties": json.dumps(k.properties()),
            "value.schema.name": v.name(), "value.schema.type": v.schema_type().name,
            "value.schema.properties": json.dumps(v.properties()), "kv.encoding.type": "INLINE",
        }
        super().__init__(None, SchemaType.KEY_VALUE, definition, "KeyValue", properties)

    def encode(self, obj) -> bytes:
        if not isinstance(obj, tuple) or len(obj) != 2:
            raise TypeError(f"KeyValueSchema encodes a (key, value) pair, got {type(obj).__name__}")
        key, value = self.key_schema.encode(obj[0]), self.value_schema.encode(obj[1])
        return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value

    def decode(self, data: bytes):
        (n,) = struct.unpack_from(">i", data, 0)
        key = data[4:4 + n]
        (m,) = struct.unpack_from(">i", data, 4 + n)
        value = data[8 + n:8 + n + m]
        if n < 0 or m < 0 or 8 + n + m != len(data):
            raise ValueError("malformed key/value payload")
        return KeyValue(self.key_schema.decode(key), self.value_schema.decode(value))


class WriterSchemas:
    """Schemas by (topic, version) as fetched from the broker, most recently used kept (bounded)."""

    def __init__(self, capacity: int = 1000):
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, int], SchemaInfo] = OrderedDict()

    def get(self, topic: str, version: int) -> SchemaInfo | None:
        info = self._entries.get((topic, version))
        if info is not None:
            self._entries.move_to_end((topic, version))
        return info

    def put(self, topic: str, version: int, info: SchemaInfo) -> None:
        self._entries[(topic, version)] = info
        self._entries.move_to_end((topic, version))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
