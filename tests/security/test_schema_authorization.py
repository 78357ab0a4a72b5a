"""Schemas under authorization: GET_SCHEMA needs lookup (produce or consume), GET_OR_CREATE_SCHEMA produce, the
schema REST a tenant admin; a refused request stores nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest
from pulsar.schema import AvroSchema

from tests.security.test_authorization import _eventually, admin, broker, client, cluster, grant, namespace  # noqa: F401

V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}


def rest(broker, method: str, path: str, body=None) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{broker.web_url}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_schema_access_follows_the_grants(broker, client, admin, namespace):
    topic = f"persistent://{namespace}/typed"
    path = f"/admin/v2/schemas/{namespace}/typed/schema"
    payload = {"type": "AVRO", "schema": json.dumps(V0), "properties": {}}
    assert rest(broker, "POST", path, payload) == 403  # anon is no tenant admin
    with pytest.raises(pulsar.AuthorizationError):
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0))
    with pytest.raises(pulsar.AuthorizationError):
        client._client.get_schema_info(topic, 0)
    assert admin(lambda r: r.store.exists(f"/schemas/{namespace}/typed")) is None  # refused: nothing stored

    grant(admin, namespace, "anon", ["produce"])
    _eventually(lambda: client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0)),
                "the grant to let anon produce")
    assert client._client.get_schema_info(topic, 0).schema()  # produce implies lookup
    assert rest(broker, "GET", path) == 403 and rest(broker, "DELETE", path) == 403
