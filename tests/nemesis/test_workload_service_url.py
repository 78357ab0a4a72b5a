"""Every workload client is given every broker, its list starting at a different one (loadtest/nemesis/workload.py)."""

from __future__ import annotations

import pytest

from loadtest.nemesis.workload import service_url
from magnetar.tls import parse_service_hosts

BROKERS = ["pulsar://127.0.0.1:1001", "pulsar://127.0.0.1:1002", "pulsar://127.0.0.1:1003"]


@pytest.mark.parametrize("i, expected", [
    (0, "pulsar://127.0.0.1:1001,127.0.0.1:1002,127.0.0.1:1003"),
    (1, "pulsar://127.0.0.1:1002,127.0.0.1:1003,127.0.0.1:1001"),
    (5, "pulsar://127.0.0.1:1003,127.0.0.1:1001,127.0.0.1:1002"),
])
def test_each_client_gets_every_broker_starting_at_its_own(i, expected):
    assert service_url(BROKERS, i) == expected
    assert sorted(parse_service_hosts(expected)[0]) == [u.removeprefix("pulsar://") for u in BROKERS]


def test_a_standalone_run_has_one_host():
    assert service_url(["pulsar://127.0.0.1:6000"], 3) == "pulsar://127.0.0.1:6000"
