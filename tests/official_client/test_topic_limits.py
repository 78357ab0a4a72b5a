"""maxTopicsPerNamespace and maxNumPartitionsPerPartitionedTopic on a real broker: creates beyond them are refused
with a reason naming the key, over the wire (auto-creation) and over REST; what exists keeps working."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.official_client.support import admin_call


@pytest.fixture
def broker(start_standalone):
    return start_standalone(env={"MAGNETAR_BROKER_MAX_TOPICS_PER_NAMESPACE": "4",
                                 "MAGNETAR_BROKER_MAX_NUM_PARTITIONS_PER_PARTITIONED_TOPIC": "3"})


def test_topic_and_partition_limits(broker):
    ns = f"public/limits-{uuid.uuid4().hex[:6]}"
    assert admin_call(broker, "PUT", f"/admin/v2/namespaces/{ns}", {})[0] == 204
    status, body = admin_call(broker, "PUT", f"/admin/v2/persistent/{ns}/wide/partitions", 4)
    assert status == 405 and "maxNumPartitionsPerPartitionedTopic" in body["reason"]
    assert admin_call(broker, "PUT", f"/admin/v2/persistent/{ns}/p/partitions", 3)[0] == 204  # 3 topics
    client = pulsar.Client(broker.service_url)
    try:
        client.create_producer(f"persistent://{ns}/t1").send(b"x")  # the 4th
        with pytest.raises(pulsar.NotAllowedError):  # the C++ client keeps the code; the reason is in the broker's answer
            client.create_producer(f"persistent://{ns}/t2")
        status, body = admin_call(broker, "PUT", f"/admin/v2/persistent/{ns}/t3")
        assert status == 405 and "maxTopicsPerNamespace" in body["reason"]
        status, body = admin_call(broker, "POST", f"/admin/v2/persistent/{ns}/p/partitions", 4)  # +1 topic
        assert status == 405
        consumer = client.subscribe(f"persistent://{ns}/t1", "s", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(10_000).data() == b"x"  # what exists keeps working
    finally:
        client.close()
