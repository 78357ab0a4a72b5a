"""Admin operations on a partitioned topic whose partitions live on different brokers: the broker asked does
its own partitions and asks the owners of the others."""

from __future__ import annotations

import pulsar
import pytest

from tests.cluster.support import client as _client, owner_of
from tests.official_client.support import admin_call as call

PARTITIONS = 6


def test_terminate_partitions_reaches_partitions_other_brokers_own(two_brokers):
    base = "persistent://public/default/spread"
    assert call(two_brokers[0], "PUT", "/admin/v2/persistent/public/default/spread/partitions", PARTITIONS)[0] == 204
    owners = {i: owner_of(two_brokers, f"{base}-partition-{i}") for i in range(PARTITIONS)}
    asked = two_brokers[0] if any(o is not two_brokers[0] for o in owners.values()) else two_brokers[1]
    remote = [i for i, o in owners.items() if o is not asked]
    assert remote, "at least one partition is another broker's"
    clients = {id(b): _client(b.service_url) for b in two_brokers}
    try:
        for i, owner in owners.items():  # one message on each partition, through its owner
            clients[id(owner)].create_producer(f"{base}-partition-{i}").send(b"m")
        status, answer = call(asked, "POST", "/admin/v2/persistent/public/default/spread/terminate/partitions")
        assert status == 200 and sorted(map(int, answer)) == list(range(PARTITIONS)), answer
        assert all(answer[str(i)]["entryId"] == 0 and answer[str(i)]["partitionIndex"] == i for i in range(PARTITIONS))
        for i, owner in owners.items():
            with pytest.raises(pulsar.TopicTerminated):
                clients[id(owner)].create_producer(f"{base}-partition-{i}")
        print(f"{len(remote)} of {PARTITIONS} partitions terminated through their owner")
    finally:
        for c in clients.values():
            c.close()
