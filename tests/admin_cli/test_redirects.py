"""`magnetar-admin` on a two-broker cluster: a bundle operation sent to the broker that does not own the bundle is
redirected (307) to its owner, and the CLI sends it again there (same method and flags), as pulsar-admin does."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from storage.testing.processes import BrokerProcess
from storage.testing.waiting import wait_until
from tests.admin_cli.support import Admin

WHOLE = "0x00000000_0xffffffff"


@pytest.fixture
def two_brokers(start_bookies, tmp_path):
    url = start_bookies(3).metadata_url
    brokers = [BrokerProcess(tmp_path / f"broker-{i}", metadata_url=url) for i in range(2)]
    for broker in brokers:
        broker.spawn()
    try:
        for broker in brokers:
            broker.wait_healthy(60)
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


def test_split_and_unload_through_the_broker_that_does_not_own_the_bundle(two_brokers):
    admins = [Admin(b.web_url) for b in two_brokers]
    ns = f"public/redirect-{uuid.uuid4().hex[:8]}"
    admins[0]("namespaces", "create", ns, "--bundles", "1").ok()
    client = pulsar.Client(two_brokers[0].service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer(f"persistent://{ns}/t").send(b"x")  # the lookup gives the bundle an owner
    finally:
        client.close()
    owned = [admin("namespaces", "bundles", ns).json()["owned"] for admin in admins]
    owner = 0 if owned[0] else 1
    assert owned[owner] == [WHOLE] and owned[1 - owner] == []
    other = admins[1 - owner]

    other("namespaces", "split-bundle", ns, "-b", WHOLE).ok()
    assert admins[owner]("namespaces", "bundles", ns).json()["numBundles"] == 2

    halves = admins[owner]("namespaces", "bundles", ns).json()["owned"]
    assert halves, "the owner keeps both halves after a split without --unload"
    for bundle in halves:
        other("namespaces", "unload", ns, "--bundle", bundle).ok()
    wait_until(lambda: admins[owner]("namespaces", "bundles", ns).json()["owned"] == [], timeout_s=20,
               what="the owner to have unloaded both halves")
