"""Two `broker start` processes on one real ZooKeeper and three bookie processes."""

from __future__ import annotations

import pytest

from tests.harness.processes import BrokerProcess

SESSION = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}


@pytest.fixture
def two_brokers(start_bookies, tmp_path):
    cluster = start_bookies(3)
    brokers = [BrokerProcess(tmp_path / f"broker-{i}", metadata_url=cluster.metadata_url, env=dict(SESSION)) for i in range(2)]
    for b in brokers:
        b.spawn()
    for b in brokers:
        b.wait_healthy(60)
    yield brokers
    for b in brokers:
        b.stop()
