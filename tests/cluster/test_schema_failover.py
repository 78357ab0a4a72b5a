"""A schema history on a real cluster (ZooKeeper, three bookies, two brokers) outlives its topic's owner."""

from __future__ import annotations

import json

import pulsar
import pytest
from pulsar.schema import AvroSchema

from storage.testing.waiting import wait_until
from tests.cluster.support import client as cluster_client, owner_of
from tests.official_client.support import admin_call as call

V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}
V1 = {"type": "record", "name": "Order",
      "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string", "default": ""}]}
V_BAD = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def test_schemas_survive_the_owner_s_kill_9(start_brokers):
    brokers = start_brokers(2)
    topic = "persistent://public/default/schema-failover"
    owner = owner_of(brokers, topic)
    survivor = next(b for b in brokers if b is not owner)
    client = cluster_client(survivor.service_url)
    try:
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V0)).send({"id": 1})
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1)).send({"id": 2, "note": "n"})
    finally:
        client.close()
    owner.kill9()

    path = f"/admin/v2/schemas/{topic.removeprefix('persistent://')}"
    assert call(survivor, "GET", path + "/versions")[1] == [0, 1]
    assert json.loads(call(survivor, "GET", path + "/schema/0")[1]["data"]) == V0
    client = cluster_client(survivor.service_url)
    try:
        def reader_on_the_new_owner():
            try:
                return client.create_reader(topic, pulsar.MessageId.earliest,
                                            schema=AvroSchema(None, schema_definition=V1))
            except pulsar.PulsarException:
                return None  # the bundle is still moving to the survivor

        reader = wait_until(reader_on_the_new_owner, 60, "the survivor to serve the topic")
        assert [reader.read_next(20_000).value() for _ in range(2)] == [{"id": 1, "note": ""}, {"id": 2, "note": "n"}]
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(None, schema_definition=V_BAD))
        assert call(survivor, "GET", path + "/versions")[1] == [0, 1]
    finally:
        client.close()
