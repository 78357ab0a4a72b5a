"""Schema'd topics in Spark: the source's ``expandSchema`` columns and the value decoding behind them.

With ``expandSchema=true`` the source reads the topic's latest schema from the
admin API when the query is planned. An AVRO or JSON record becomes one column
per field (nested records as structs, arrays, maps with string keys, enums as
strings, ``["null", T]`` as a nullable T), a STRING schema one ``value string``
column; the message's own fields follow as ``__key``, ``__topic``,
``__messageId``, ``__publishTime``, ``__eventTime`` and
``__messageProperties`` (pulsar-spark's names). Each message is decoded with the
schema it was written with (looked up by its schema version) resolved against
the planned one by Avro's rules, so a topic whose schema evolved compatibly
reads as one table; a message written without a schema version is read with
the planned schema.
"""

from __future__ import annotations

import io
import json

import fastavro

from connectors.spark.rows import MessageColumns

META_COLUMNS = ("__key", "__topic", "__messageId", "__publishTime", "__eventTime", "__messageProperties")
EXPANDABLE = ("AVRO", "JSON", "STRING")


class SchemaExpansionError(ValueError):
    """The topic's schema cannot be expanded into columns (none, or a type or field Spark cannot hold)."""


def _arrow_type(schema, names: dict, path: str):
    import pyarrow as pa

    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SchemaExpansionError(f"field {path}: a union of {schema} has no single Spark type")
        return _arrow_type(branches[0], names, path)
    if isinstance(schema, str):
        if schema in names:
            return _arrow_type(names[schema], names, path)
        schema = {"type": schema}
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _arrow_type(kind, names, path)
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    primitive = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                 "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
    if kind in primitive:
        return primitive[kind]
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(_arrow_type(schema["items"], names, f"{path}[]"))
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(schema["values"], names, f"{path}{{}}"))
    if kind in ("record", "error"):
        names[schema["name"]] = schema
        return pa.struct([(f["name"], _arrow_type(f["type"], names, f"{path}.{f['name']}")) for f in schema["fields"]])
    raise SchemaExpansionError(f"field {path}: Avro type {kind!r} has no Spark column type")


def expanded_arrow_schema(info: dict):
    """The Arrow schema of an expanded topic from its schema as the admin API gives it (``type``, ``data``)."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    meta = [("__key", pa.string()), ("__topic", pa.string()), ("__messageId", pa.binary()), ("__publishTime", ts),
            ("__eventTime", ts), ("__messageProperties", pa.map_(pa.string(), pa.string()))]
    if info["type"] == "STRING":
        return pa.schema([("value", pa.string()), *meta])
    definition = reader_definition(info)
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise SchemaExpansionError("expandSchema needs a record schema at the top level")
    record = _arrow_type(definition, {}, definition.get("name", "value"))
    clash = {f.name for f in record} & set(META_COLUMNS)
    if clash:
        raise SchemaExpansionError(f"record field(s) {sorted(clash)} clash with the metadata columns")
    return pa.schema([(f.name, f.type) for f in record] + meta)


def reader_definition(info: dict):
    if info["type"] not in EXPANDABLE:
        raise SchemaExpansionError(f"expandSchema reads AVRO, JSON and STRING topics; this topic's schema is "
                                   f"{info['type']}")
    if info["type"] == "STRING":
        return None
    try:
        definition = json.loads(info["data"])
        fastavro.parse_schema(definition)
    except (ValueError, TypeError, KeyError) as exc:
        raise SchemaExpansionError(f"the topic's schema definition is not a valid Avro schema: {exc}") from None
    return definition


class ValueDecoder:
    """Decodes payloads into column values: a dict per record (or a str for STRING). ``writer(version)`` gives the
    definition a version was written with (the source fetches it once per task and version)."""

    def __init__(self, info: dict, writer):
        self.type = info["type"]
        self.definition = reader_definition(info)
        self._reader = fastavro.parse_schema(self.definition) if self.definition is not None else None
        self._writer_of = writer
        self._writers: dict[int, object] = {}

    def decode(self, payload: bytes, version: int):
        if self.type == "STRING":
            return payload.decode("utf-8", "replace")
        if self.type == "JSON":
            return json.loads(payload)
        writer = self._reader if version < 0 else self._writers.get(version)
        if writer is None:
            written = dict(self._writer_of(version))
            written["name"] = self.definition["name"]  # the top-level name is free (as the broker's check)
            written.pop("namespace", None)
            if self.definition.get("namespace"):
                written["namespace"] = self.definition["namespace"]
            writer = self._writers[version] = fastavro.parse_schema(written)
        return fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader)


class ExpandedRows(MessageColumns):
    """The columns of one Arrow record batch of an expanded topic: values decoded by their writer's version."""

    def __init__(self, topic: str, decoder: ValueDecoder):
        super().__init__(topic)
        self.decoder = decoder

    def entry_values(self, entry, kept: slice) -> list:
        raw = entry.metadata.schema_version
        version = int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1
        return [self.decoder.decode(p, version) for p in entry.payloads[kept]]

    def record_batch(self, schema):
        import pyarrow as pa

        n = len(self)
        meta = [self.keys, [self.topic] * n, self.ids, self.publish_times, self.event_times, self.properties]
        fields = [f for f in schema if f.name not in META_COLUMNS]
        if self.decoder.type == "STRING":
            columns = [self.values]
        else:
            columns = [[None if v is None else v.get(f.name) for v in self.values] for f in fields]
        arrays = [pa.array(c, f.type) for c, f in zip(columns + meta, schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def topic_schema(options) -> dict:
    """The schema the source expands: the first topic's latest (every topic read should share it)."""
    from connectors.spark.admin import Admin, TopicMissing

    if not options.topics:
        raise SchemaExpansionError("expandSchema needs option 'topic' or 'topics' (the schema is read from the first)")
    try:
        info = Admin(options.admin_url, security=options.security).schema(options.topics[0])
    except TopicMissing:
        raise SchemaExpansionError(f"expandSchema: {options.topics[0]} has no schema") from None
    reader_definition(info)  # refuses a type it cannot expand, at planning
    return info


# ---- the sink: a struct column written as AVRO or JSON records ---------------------------------------------


def avro_from_spark(data_type, name: str = "Value", names: set | None = None):
    """The Avro schema of a Spark type (the sink's ``valueSchema``); nullable fields become ``["null", T]`` with a
    null default. SchemaExpansionError for a type without an Avro counterpart."""
    from pyspark.sql import types as t

    names = set() if names is None else names
    simple = {t.StringType: "string", t.LongType: "long", t.IntegerType: "int", t.ShortType: "int",
              t.ByteType: "int", t.DoubleType: "double", t.FloatType: "float", t.BooleanType: "boolean",
              t.BinaryType: "bytes"}
    for spark_type, avro in simple.items():
        if isinstance(data_type, spark_type):
            return avro
    if isinstance(data_type, (t.TimestampType, t.TimestampNTZType)):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(data_type, t.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(data_type, t.ArrayType):
        return {"type": "array", "items": _nullable(avro_from_spark(data_type.elementType, name + "Item", names),
                                                     data_type.containsNull)}
    if isinstance(data_type, t.MapType):
        if not isinstance(data_type.keyType, t.StringType):
            raise SchemaExpansionError(f"{name}: Avro maps need string keys, not {data_type.keyType.simpleString()}")
        return {"type": "map", "values": _nullable(avro_from_spark(data_type.valueType, name + "Value", names),
                                                   data_type.valueContainsNull)}
    if isinstance(data_type, t.StructType):
        record = name if name not in names else f"{name}{len(names)}"
        names.add(record)
        fields = []
        for f in data_type.fields:
            kind = avro_from_spark(f.dataType, f.name[:1].upper() + f.name[1:], names)
            fields.append({"name": f.name, "type": ["null", kind], "default": None} if f.nullable
                          else {"name": f.name, "type": kind})
        return {"type": "record", "name": record, "fields": fields}
    raise SchemaExpansionError(f"{name}: Spark type {data_type.simpleString()} has no Avro counterpart")


def _nullable(kind, nullable: bool):
    return ["null", kind] if nullable else kind


