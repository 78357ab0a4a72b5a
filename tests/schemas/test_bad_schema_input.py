"""Malformed schemas on the wire get a specific error on their own request id; the connection and topic go on."""

from __future__ import annotations

import json

import pytest

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command
from tests.official_client.support import RawConnection, admin_call as call

T = pb.BaseCommand
VALID = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}).encode()


@pytest.fixture
def raw(standalone):
    conn = RawConnection(standalone.port)
    conn.connect()
    yield conn
    conn.close()


def _producer(raw, topic: str, request_id: int, schema: pb.Schema):
    raw.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=request_id, request_id=request_id, schema=schema))))
    return raw.next()


@pytest.mark.parametrize("schema,reason", [
    (pb.Schema(name="s", schema_data=b"not json", type=pb.Schema.Avro), "not a valid Avro schema"),
    (pb.Schema(name="s", schema_data=b'{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}',
               type=pb.Schema.Json), "not a valid Avro schema"),
    (pb.Schema(name="s", schema_data=b"x" * (300 * 1024), type=pb.Schema.String), "exceeds"),
    (pb.Schema(name="s", schema_data=b"", type=pb.Schema.String,
               properties=[pb.KeyValue(key=str(i), value="v") for i in range(100)]), "at most 64"),
    (pb.Schema(name="n" * 2000, schema_data=b"", type=pb.Schema.String), "name exceeds"),
])
def test_bad_producer_schemas_are_refused_on_their_request(standalone, raw, topic, schema, reason):
    reply = _producer(raw, topic, 1, schema)
    assert reply.type == T.ERROR and reply.error.request_id == 1 and reply.error.error == pb.NotAllowedError
    assert reason in reply.error.message
    ok = _producer(raw, topic, 2, pb.Schema(name="s", schema_data=VALID, type=pb.Schema.Avro))
    assert ok.type == T.PRODUCER_SUCCESS and ok.producer_success.schema_version == (0).to_bytes(8, "big")
    assert call(standalone, "GET", f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/versions")[1] == [0]


@pytest.mark.parametrize("version", [b"\x01", b"\x00" * 9])
def test_get_schema_with_a_malformed_version(raw, topic, version):
    raw.send(encode_command(command(T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
        request_id=7, topic=topic, schema_version=version))))
    reply = raw.next()
    assert reply.type == T.GET_SCHEMA_RESPONSE and reply.getSchemaResponse.request_id == 7
    assert reply.getSchemaResponse.error_code == pb.NotAllowedError and "8 bytes" in reply.getSchemaResponse.error_message


def test_get_or_create_schema(raw, topic):
    def get_or_create(request_id, data):
        raw.send(encode_command(command(T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=request_id, topic=topic, schema=pb.Schema(name="s", schema_data=data, type=pb.Schema.Avro)))))
        return raw.next().getOrCreateSchemaResponse

    first = get_or_create(1, VALID)
    assert not first.HasField("error_code") and first.schema_version == (0).to_bytes(8, "big")
    assert get_or_create(2, VALID).schema_version == (0).to_bytes(8, "big")  # the same schema: its version
    bad = get_or_create(3, json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}).encode())
    assert bad.error_code == pb.IncompatibleSchema and "cannot read" in bad.error_message
    raw.send(encode_command(command(T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=4, topic=topic))))
    latest = raw.next().getSchemaResponse
    assert latest.schema.schema_data == VALID and latest.schema_version == (0).to_bytes(8, "big")
