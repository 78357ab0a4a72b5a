"""Service URLs with several hosts (``pulsar://h1:p1,h2:p2``): parsing, and the order the hosts are dialled in.

The real-broker side (the first host down, then the one in use lost: the next one is dialled) is tests/cluster/test_service_url_hosts.py.
"""

from __future__ import annotations

import pytest

import magnetar
from magnetar.asyncio.service_hosts import ServiceHosts
from magnetar.tls import MAX_SERVICE_HOSTS, parse_service_hosts, parse_service_url


@pytest.mark.parametrize("url, expected", [
    ("pulsar://127.0.0.1:6650", (("127.0.0.1:6650",), False)),
    ("pulsar://h1:6650,h2:6651", (("h1:6650", "h2:6651"), False)),
    ("pulsar://h1:6650,h2:6651,h3:6652/", (("h1:6650", "h2:6651", "h3:6652"), False)),
    ("pulsar+ssl://a.example:6651,b.example:6651", (("a.example:6651", "b.example:6651"), True)),
])
def test_service_url_hosts(url, expected):
    assert parse_service_hosts(url) == expected


@pytest.mark.parametrize("url, error", [
    ("pulsar://h1:6650,", "bad host ''"),
    ("pulsar://h1:6650,,h2:6650", "bad host ''"),
    ("pulsar://h1:6650,h2", "bad host 'h2'"),
    ("pulsar://h1:6650, h2:6650", "bad host ' h2:6650'"),
    ("pulsar://h1:6650,h2:70000", "bad host 'h2:70000'"),
    ("pulsar://h1:6650,pulsar://h2:6650", "bad host 'pulsar://h2:6650'"),
    ("http://h1:6650,h2:6650", "pulsar://host:port\\[,host:port...\\]"),
    (",".join(["pulsar://h0:1"] + [f"h{i}:1" for i in range(1, MAX_SERVICE_HOSTS + 1)]), "at most 64"),
])
def test_bad_service_url_hosts(url, error):
    with pytest.raises(ValueError, match=error):
        parse_service_hosts(url)


def test_a_lookup_answer_names_one_broker():
    with pytest.raises(ValueError, match="pulsar://host:port or pulsar\\+ssl://host:port"):
        parse_service_url("pulsar://h1:6650,h2:6650")


def test_the_client_takes_several_hosts_and_refuses_a_bad_one_at_once():
    with pytest.raises(ValueError, match="bad host 'h2'"):
        magnetar.Client("pulsar://h1:6650,h2")
    client = magnetar.Client("pulsar://127.0.0.1:1,127.0.0.1:2", operation_timeout_seconds=5)
    client.close()


# Each row: the events of one client's life and the hosts the next attempt dials, in order.
# "A", "B", "C" answered; "none" no host answered.
ROTATION = [
    ([], ["h1", "h2", "h3"]),  # at first the URL's order
    (["h1"], ["h2", "h3", "h1"]),  # h1's connection was lost: start after it
    (["h2"], ["h3", "h1", "h2"]),  # h1 was down, h2 answered; lost: h3 next
    (["h1", "h2", "h3"], ["h1", "h2", "h3"]),  # round-robin wraps
    (["none"], ["h2", "h3", "h1"]),  # nobody answered: the retry starts one further on
    (["none", "none", "none"], ["h1", "h2", "h3"]),
    (["h3", "none"], ["h2", "h3", "h1"]),
]


@pytest.mark.parametrize("events, expected", ROTATION)
def test_hosts_are_tried_in_turn_round_robin_on_reconnect(events, expected):
    hosts = ServiceHosts(("h1", "h2", "h3"))
    for event in events:
        hosts.none_answered() if event == "none" else hosts.answered(event)
    assert hosts.to_try() == expected
    assert hosts.current == next((e for e in reversed(events) if e != "none"), None)


def test_one_host_is_always_the_one_tried():
    hosts = ServiceHosts(("only:6650",))
    for step in (lambda: None, hosts.none_answered, lambda: hosts.answered("only:6650")):
        step()
        assert hosts.to_try() == ["only:6650"]


def test_no_host_is_an_error():
    with pytest.raises(ValueError, match="at least one host"):
        ServiceHosts(())
