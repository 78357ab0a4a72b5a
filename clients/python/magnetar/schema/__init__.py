"""Typed messages with the same classes as ``pulsar.schema`` (Record and its fields, AvroSchema, JsonSchema,
StringSchema, BytesSchema, KeyValueSchema), so code moves between the clients by changing the import."""

from magnetar.schema.definition import (
    Array, Boolean, Bytes, CustomEnum, Double, Field, Float, Integer, Long, Map, Null, Record, String,
)
from magnetar.schema.schema import (
    AvroSchema, BytesSchema, JsonSchema, KeyValue, KeyValueSchema, Schema, SchemaInfo, SchemaType, StringSchema,
    WriterSchemas,
)

__all__ = ["Array", "AvroSchema", "Boolean", "Bytes", "BytesSchema", "CustomEnum", "Double", "Field", "Float",
           "Integer", "JsonSchema", "KeyValue", "KeyValueSchema", "Long", "Map", "Null", "Record", "Schema",
           "SchemaInfo", "SchemaType", "String", "StringSchema", "WriterSchemas"]
