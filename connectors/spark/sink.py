"""Writing to Magnetar topics from Spark: ``df.write.format("magnetar")`` and ``df.writeStream.format("magnetar")``.

Each task publishes its rows with batching producers on a private event loop
and returns once every message is acknowledged by the broker, so a task that
succeeds has stored all its rows. A retried task publishes its rows again:
the sink is at-least-once, as Spark's Kafka sink is.

Columns: ``value`` (binary or string, required); optional ``key`` (string,
sent as the partition key), ``properties`` (map<string,string>), ``eventTime``
(timestamp) and ``topic`` (string, used when the ``topic`` option is not
set). Other columns, such as those the source adds, are ignored.

With ``valueSchema`` = ``avro`` or ``json``, ``value`` is a struct column: the
producers declare the Avro schema derived from its Spark type (the topic's
registry checks it like any producer's) and write each row's value as an Avro
or JSON record (connectors/spark/schemas.py).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType, TimestampNTZType, TimestampType

from connectors.spark.offsets import topic_url
from connectors.spark.options import MagnetarOptionError, SinkOptions
from connectors.spark.schemas import SchemaExpansionError, avro_from_spark

_COLUMN_TYPES = {
    "value": (BinaryType, StringType),
    "key": (StringType,),
    "topic": (StringType,),
    "eventTime": (TimestampType, TimestampNTZType),
    "properties": (MapType,),
}
_WINDOW = 5_000  # messages in flight per task


@dataclasses.dataclass
class Written(WriterCommitMessage):
    messages: int


def check_schema(schema: StructType, options: SinkOptions) -> dict | None:
    """Check the data's columns; with ``valueSchema``, returns the Avro definition ``value`` rows are written with."""
    fields = {f.name: f for f in schema.fields}
    if "value" not in fields:
        raise MagnetarOptionError(f"the magnetar sink needs a 'value' column; the data has {', '.join(fields) or 'none'}")
    if options.topic is None and "topic" not in fields:
        raise MagnetarOptionError("the magnetar sink needs the 'topic' option or a 'topic' column")
    definition = None
    if options.value_schema is not None:
        if not isinstance(fields["value"].dataType, StructType):
            raise MagnetarOptionError(f"valueSchema={options.value_schema} needs a struct 'value' column, not "
                                      f"{fields['value'].dataType.simpleString()}")
        try:
            definition = avro_from_spark(fields["value"].dataType)
        except SchemaExpansionError as exc:
            raise MagnetarOptionError(f"column 'value': {exc}") from None
        fields = {k: v for k, v in fields.items() if k != "value"}
    for name, types in _COLUMN_TYPES.items():
        if name in fields and not isinstance(fields[name].dataType, types):
            raise MagnetarOptionError(f"column {name!r} must be {' or '.join(t.typeName() for t in types)}, "
                                      f"not {fields[name].dataType.simpleString()}")
    if "properties" in fields:
        kv = fields["properties"].dataType
        if not (isinstance(kv.keyType, StringType) and isinstance(kv.valueType, StringType)):
            raise MagnetarOptionError("column 'properties' must be map<string,string>")
    return definition


def _message(row, options: SinkOptions) -> tuple[str, bytes, dict]:
    data = row.asDict()
    value = data["value"]
    if value is None:
        raise ValueError("a row with a null 'value' cannot be published")
    if options.value_schema is not None:
        payload = value.asDict(recursive=True)  # the producer's schema encodes it
    else:
        payload = value.encode() if isinstance(value, str) else bytes(value)
    topic = options.topic or topic_url(data["topic"] or "")
    kwargs = {}
    if data.get("key") is not None:
        kwargs["partition_key"] = data["key"]
    if data.get("properties"):
        kwargs["properties"] = {str(k): str(v) for k, v in data["properties"].items()}
    if data.get("eventTime") is not None:
        kwargs["event_timestamp"] = int(data["eventTime"].timestamp() * 1000)
    return topic, payload, kwargs


def publish(options: SinkOptions, rows: Iterator, chunk: int = 1_000, value_definition: dict | None = None) -> int:
    """Publish every row and wait for every receipt; returns how many were published. ``value_definition``: the
    Avro definition of schema'd values (``valueSchema``)."""
    from magnetar.asyncio.client import AsyncClient
    from magnetar.schema import AvroSchema, JsonSchema

    schema = None
    if value_definition is not None:
        kind = AvroSchema if options.value_schema == "avro" else JsonSchema
        schema = kind(None, schema_definition=value_definition)

    loop = asyncio.new_event_loop()
    producers: dict[str, object] = {}
    pending: collections.deque = collections.deque()
    count = 0

    async def make_client():
        return AsyncClient(options.service_url, operation_timeout_seconds=30, **options.security.client_options())

    async def send(batch):
        for topic, payload, kwargs in batch:
            producer = producers.get(topic)
            if producer is None:
                producer = producers[topic] = await client.create_producer(
                    topic, batching_enabled=True, batching_max_publish_delay_ms=options.batching_max_publish_delay_ms,
                    max_pending_messages=_WINDOW * 2, schema=schema)
            while len(pending) >= _WINDOW:
                await pending.popleft()
            pending.append(producer.send_async(payload, **kwargs))

    async def drain():
        for producer in producers.values():
            await producer.flush()
        while pending:
            await pending.popleft()

    client = loop.run_until_complete(make_client())
    try:
        batch = []
        for row in rows:
            batch.append(_message(row, options))
            if len(batch) >= chunk:
                loop.run_until_complete(send(batch))
                count += len(batch)
                batch = []
        loop.run_until_complete(send(batch))
        count += len(batch)
        loop.run_until_complete(drain())
        return count
    finally:
        for future in pending:
            future.cancel()
        loop.run_until_complete(client.close())
        loop.close()


class MagnetarWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions, value_definition: dict | None = None):
        self.options, self.value_definition = options, value_definition

    def write(self, iterator):
        return Written(publish(self.options, iterator, value_definition=self.value_definition))


class MagnetarStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SinkOptions, value_definition: dict | None = None):
        self.options, self.value_definition = options, value_definition

    def write(self, iterator):
        return Written(publish(self.options, iterator, value_definition=self.value_definition))

    def commit(self, messages, batchId) -> None:
        pass  # every task waited for its receipts: nothing is left to make durable

    def abort(self, messages, batchId) -> None:
        pass  # published messages cannot be taken back; the retried batch publishes again (at-least-once)
