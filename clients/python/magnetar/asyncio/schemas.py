"""The client side of schemas on the wire: GET_SCHEMA (a topic's schema by version) and the decoding context a
consumer puts on each message it hands out."""

from __future__ import annotations

import logging

from magnetar.errors import MagnetarError, for_code
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.schema.schema import SchemaInfo

log = logging.getLogger(__name__)
T = pb.BaseCommand


async def get_schema_info(client, topic: str, version: int | None = None) -> SchemaInfo:
    """The topic's schema (the latest, or ``version``). Raises TopicNotFound when there is none."""
    conn = await client.connection_for(topic)
    req = pb.CommandGetSchema(request_id=conn.next_request_id(), topic=topic)
    if version is not None and version >= 0:
        req.schema_version = version.to_bytes(8, "big", signed=True)
    resp = await conn.request(T.GET_SCHEMA, "getSchema", req)
    if resp.HasField("error_code"):
        raise for_code(resp.error_code, resp.error_message)
    return SchemaInfo.from_proto(resp.schema)


class SchemaReader:
    """Puts a consumer's schema on each message and, for a schema that resolves against the writer's (Avro),
    the schema the message was written with, looked up by its version once per (topic, version)."""

    def __init__(self, client, schema):
        self.client, self.schema = client, schema

    async def attach(self, msg) -> None:
        msg._schema = self.schema
        if not self.schema.needs_writer_schema:
            return
        version = msg.int_schema_version()
        if version < 0:
            return
        cache, topic = self.client.writer_schemas, msg.topic_name()
        writer = cache.get(topic, version)
        if writer is None:
            try:
                writer = await get_schema_info(self.client, topic, version)
            except MagnetarError as exc:  # decode with the consumer's own schema, as the official client does
                log.warning("schema version %d of %s could not be fetched: %s", version, topic, exc)
                return
            cache.put(topic, version, writer)
        msg._writer = writer
