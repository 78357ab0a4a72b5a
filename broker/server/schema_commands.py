"""The schema side of the Pulsar commands: GET_SCHEMA, GET_OR_CREATE_SCHEMA, and the schema a PRODUCER or SUBSCRIBE
carries, translated between protobuf and the registry (broker/schemas)."""

from __future__ import annotations

from broker.errors import BrokerError
from broker.schemas import SchemaInfo, decode_version, encode_version
from broker.security.authorization import Need, check, effective_role
from broker.topics.names import parse_topic
from magnetar.protocol import pulsar_api_pb2 as pb

T = pb.BaseCommand
__all__ = ["encode_version", "on_get_schema", "on_get_or_create_schema", "schema_of", "topic_is_idle"]


def schema_of(command) -> SchemaInfo | None:
    """The schema a PRODUCER or SUBSCRIBE declares (None: none). InvalidSchemaError for one out of bounds."""
    return SchemaInfo.from_proto(command.schema) if command.HasField("schema") else None


def topic_is_idle(topic) -> bool:
    """No producers, no connected consumers and no data: a consumer's schema may become the topic's first."""
    return (not topic.producers and topic.storage_size == 0
            and not any(sub.consumers for sub in topic.subscriptions.values()))


def on_get_schema(conn, frame) -> None:
    c = frame.command.getSchema

    def fail(exc: BrokerError) -> None:
        conn.write(T.GET_SCHEMA_RESPONSE, getSchemaResponse=pb.CommandGetSchemaResponse(
            request_id=c.request_id, error_code=exc.code, error_message=str(exc)))

    async def run():
        try:
            topic = parse_topic(c.topic)
            await check(conn.service, effective_role(conn), topic, Need.LOOKUP)
            version = decode_version(c.schema_version) if c.HasField("schema_version") and c.schema_version else None
            entry = await conn.service.schemas.get(topic, version)
        except BrokerError as exc:
            fail(exc)
            return
        if entry is None:
            which = "" if version is None else f" version {version}"
            conn.write(T.GET_SCHEMA_RESPONSE, getSchemaResponse=pb.CommandGetSchemaResponse(
                request_id=c.request_id, error_code=pb.TopicNotFound,
                error_message=f"Topic not found or no-schema: no schema{which} stored for {c.topic}"))
            return
        conn.write(T.GET_SCHEMA_RESPONSE, getSchemaResponse=pb.CommandGetSchemaResponse(
            request_id=c.request_id, schema=entry.info.to_proto(str(topic.partitioned_name)),
            schema_version=encode_version(entry.version)))

    conn.tasks.spawn(run(), c.request_id)


def on_get_or_create_schema(conn, frame) -> None:
    c = frame.command.getOrCreateSchema

    async def run():
        try:
            topic = parse_topic(c.topic)
            await check(conn.service, effective_role(conn), topic, Need.PRODUCE)
            version = await conn.service.schemas.register(topic, SchemaInfo.from_proto(c.schema))
        except BrokerError as exc:
            conn.write(T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=pb.CommandGetOrCreateSchemaResponse(
                request_id=c.request_id, error_code=exc.code, error_message=str(exc)))
            return
        conn.write(T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=pb.CommandGetOrCreateSchemaResponse(
            request_id=c.request_id, schema_version=encode_version(version)))

    conn.tasks.spawn(run(), c.request_id)
