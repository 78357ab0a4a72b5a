"""`broker start` processes on one real ZooKeeper and three bookie processes."""

from __future__ import annotations

import pytest

from storage.testing.processes import BrokerProcess, stop_all

SESSION = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}


@pytest.fixture
def start_brokers(start_bookies, tmp_path):
    """Factory: start_brokers(count, env=..., metadata_url=..., default_session=...) -> that many healthy brokers, on three new bookies
    unless joining the cluster at ``metadata_url``; every broker started is stopped at the end of the test."""
    started: list[BrokerProcess] = []

    def start(count: int = 2, env: dict | None = None, metadata_url: str | None = None,
              default_session: bool = False) -> list[BrokerProcess]:
        """``default_session`` keeps the broker's default metadata session timeout instead of the short one."""
        url = metadata_url or start_bookies(3).metadata_url
        base = {} if default_session else SESSION
        brokers = [BrokerProcess(tmp_path / f"broker-{len(started) + i}", metadata_url=url,
                                 env={**base, **(env or {})}) for i in range(count)]
        started.extend(brokers)
        for b in brokers:
            b.spawn()
        for b in brokers:
            b.wait_healthy(60)
        return brokers

    yield start
    stop_all(started)


@pytest.fixture
def two_brokers(start_brokers):
    return start_brokers(2)
