"""The schema registry: each topic's versioned schema history, its compatibility rules and where it is stored.

Types shared by the modules here: ``SchemaInfo`` (what a producer, consumer or
admin call offers: type, definition, properties) and ``StoredSchema`` (one
version of a topic's history). Schema types carry Pulsar's REST names
(``AVRO``, ``JSON``, ``STRING``, ``KEY_VALUE``...) and map one to one onto the
wire enum ``Schema.Type``. A schema version is a 64-bit number, sent on the
wire as 8 big-endian bytes (Pulsar's LongSchemaVersion).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from broker.errors import NotAllowedError
from magnetar.protocol import pulsar_api_pb2 as pb

# REST name <-> wire enum value (Schema.Type).
TYPE_NAMES: dict[int, str] = {
    pb.Schema.Type.Value("None"): "BYTES",  # "None" is a Python keyword, so no attribute
    pb.Schema.String: "STRING", pb.Schema.Json: "JSON", pb.Schema.Protobuf: "PROTOBUF", pb.Schema.Avro: "AVRO",
    pb.Schema.Bool: "BOOLEAN", pb.Schema.Int8: "INT8", pb.Schema.Int16: "INT16", pb.Schema.Int32: "INT32",
    pb.Schema.Int64: "INT64", pb.Schema.Float: "FLOAT", pb.Schema.Double: "DOUBLE", pb.Schema.Date: "DATE",
    pb.Schema.Time: "TIME", pb.Schema.Timestamp: "TIMESTAMP", pb.Schema.KeyValue: "KEY_VALUE",
    pb.Schema.Instant: "INSTANT", pb.Schema.LocalDate: "LOCAL_DATE", pb.Schema.LocalTime: "LOCAL_TIME",
    pb.Schema.LocalDateTime: "LOCAL_DATE_TIME", pb.Schema.ProtobufNative: "PROTOBUF_NATIVE",
}
TYPE_VALUES: dict[str, int] = {name: value for value, name in TYPE_NAMES.items()}
# Types whose definition is an Avro-style schema, checked by Avro's resolution rules (PROTOBUF compares by type).
AVRO_BASED = frozenset({"AVRO", "JSON"})
# The wire's "None" is BYTES: a client that declares it (the C++-based official clients do) registers a BYTES
# schema, as with Pulsar, so a typed producer is later refused there. NONE is the REST's name for the same.
TYPE_VALUES["NONE"] = TYPE_VALUES["BYTES"]

# Bounds on what a client or admin may register (a definition lives in one metadata node).
MAX_DEFINITION_BYTES = 256 * 1024
MAX_PROPERTIES = 64
MAX_PROPERTY_CHARS = 16 * 1024
MAX_NAME_CHARS = 1024
MAX_VERSIONS = 1000  # per topic; a history past this refuses new versions until its schema is deleted


class InvalidSchemaError(NotAllowedError):
    """A schema that is malformed or out of bounds (a definition that is not valid Avro, too many properties)."""

    http_status = 422


@dataclass(frozen=True)
class SchemaInfo:
    type: str  # a REST name from TYPE_VALUES
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self):
        check_info(self)

    def same_as(self, other: "SchemaInfo") -> bool:
        """The same schema: equal type, definition and properties (the name is not part of it). An Avro-style
        definition is compared as JSON, so clients that indent it differently still find their version."""
        return (self.type, self.properties) == (other.type, other.properties) and \
            self.canonical_data() == other.canonical_data()

    def canonical_data(self) -> bytes:
        if self.type in AVRO_BASED:
            try:
                return json.dumps(json.loads(self.data), sort_keys=True, separators=(",", ":")).encode()
            except ValueError:
                pass
        return self.data

    @classmethod
    def from_proto(cls, schema) -> "SchemaInfo":
        if schema.type not in TYPE_NAMES:
            raise InvalidSchemaError(f"unknown schema type {schema.type}")
        return cls(TYPE_NAMES[schema.type], bytes(schema.schema_data),
                   _properties({kv.key: kv.value for kv in schema.properties}), schema.name)

    def to_proto(self, name: str):
        return pb.Schema(name=name, schema_data=self.data, type=TYPE_VALUES[self.type],
                         properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(self.properties.items())])


@dataclass(frozen=True)
class StoredSchema:
    version: int
    info: SchemaInfo | None  # None: a deletion marker (Pulsar keeps the version number going after a delete)
    timestamp_ms: int

    @property
    def deleted(self) -> bool:
        return self.info is None


def _properties(props) -> dict[str, str]:
    if not isinstance(props, dict) or len(props) > MAX_PROPERTIES:
        raise InvalidSchemaError(f"schema properties must be an object of at most {MAX_PROPERTIES} string entries")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise InvalidSchemaError("schema properties must map strings to strings")
    if sum(len(k) + len(v) for k, v in props.items()) > MAX_PROPERTY_CHARS:
        raise InvalidSchemaError(f"schema properties exceed {MAX_PROPERTY_CHARS} characters")
    return dict(props)


def check_info(info: SchemaInfo) -> None:
    if info.type not in TYPE_VALUES:
        raise InvalidSchemaError(f"unknown schema type {info.type!r}; known: {sorted(TYPE_VALUES)}")
    if len(info.data) > MAX_DEFINITION_BYTES:
        raise InvalidSchemaError(f"schema definition of {len(info.data)} bytes exceeds {MAX_DEFINITION_BYTES} bytes")
    if len(info.name) > MAX_NAME_CHARS:
        raise InvalidSchemaError(f"schema name exceeds {MAX_NAME_CHARS} characters")
    _properties(info.properties)


def encode_version(version: int) -> bytes:
    return struct.pack(">q", version)


def decode_version(data: bytes) -> int:
    """A wire schema version (8 big-endian bytes). InvalidSchemaError for any other length."""
    if len(data) != 8:
        raise InvalidSchemaError(f"a schema version is 8 bytes, got {len(data)}")
    return struct.unpack(">q", data)[0]
