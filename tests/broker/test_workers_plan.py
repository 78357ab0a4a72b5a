"""The multi-process standalone's pure decisions (broker/workers.py): each worker's listeners, restart delays."""

from __future__ import annotations

import itertools

import pytest

from broker.config import BrokerConfig
from broker.workers import FIRST_RESTART_DELAY_S, MAX_RESTART_DELAY_S, STABLE_RUN_S, plan_workers, restart_delay_s

URL = "unix:///d/metadata.sock"


def ports():
    counter = itertools.count(40000)
    return lambda: next(counter)


def test_worker_zero_keeps_the_configured_listeners_and_the_others_get_their_own():
    config = BrokerConfig(metadata_store_url="file:///d/metadata", port=6650, http_port=8080, stream_port=4181)
    plans = plan_workers(config, 3, URL, ports())
    assert [(p.port, p.http_port, p.stream_port) for p in plans] == [
        (6650, 8080, 4181), (40000, 40001, None), (40002, 40003, None)]
    assert {p.metadata_store_url for p in plans} == {URL}
    assert len({p.broker_id for p in plans}) == 3  # each is its own broker of the cluster


def test_worker_zero_is_told_the_other_workers_web_urls_to_merge_their_metrics_into_its_own():
    config = BrokerConfig(metadata_store_url="file:///d/metadata", port=6650, http_port=8080)
    plans = plan_workers(config, 3, URL, ports())
    assert plans[0].metrics_worker_urls == ("http://127.0.0.1:40001", "http://127.0.0.1:40003")
    assert [p.metrics_worker_urls for p in plans[1:]] == [(), ()]  # they serve their own only: no loop
    https_only = BrokerConfig(metadata_store_url="x://", http_port=None, https_port=8443, tls_port=6651)
    assert plan_workers(https_only, 2, URL, ports())[0].metrics_worker_urls == ("https://127.0.0.1:40002",)
    assert plan_workers(config, 1, URL, ports())[0].metrics_worker_urls == ()


def test_a_listener_that_is_off_stays_off_on_every_worker_and_tls_gets_its_own_ports():
    config = BrokerConfig(metadata_store_url="x://", port=None, http_port=8080, tls_port=6651, https_port=8443,
                          stream_port=None)
    plans = plan_workers(config, 2, URL, ports())
    assert (plans[1].port, plans[1].http_port, plans[1].tls_port, plans[1].https_port) == (None, 40000, 40001, 40002)
    assert (plans[0].tls_port, plans[0].https_port) == (6651, 8443)


@pytest.mark.parametrize("count, changes, message", [
    (0, {}, "between 1 and"),
    (65, {}, "between 1 and"),
    (2, {"advertised_listeners": "internal:pulsar://127.0.0.1:6650"}, "advertisedListeners"),
    (2, {"port": 0}, "port 0"),
])
def test_plans_that_cannot_work_are_refused(count, changes, message):
    config = BrokerConfig(metadata_store_url="x://", **changes)
    with pytest.raises(ValueError, match=message):
        plan_workers(config, count, URL, ports())


def test_one_worker_may_use_any_port_and_advertised_listeners():
    config = BrokerConfig(metadata_store_url="x://", port=0, advertised_listeners="internal:pulsar://127.0.0.1:6650")
    assert plan_workers(config, 1, URL, ports())[0].port == 0


@pytest.mark.parametrize("previous, ran_for, expected", [
    (None, 0.5, FIRST_RESTART_DELAY_S),          # first death
    (FIRST_RESTART_DELAY_S, 2.0, 2 * FIRST_RESTART_DELAY_S),  # dies young again: back off
    (8.0, 3.0, 16.0),
    (MAX_RESTART_DELAY_S, 1.0, MAX_RESTART_DELAY_S),  # capped
    (16.0, STABLE_RUN_S, FIRST_RESTART_DELAY_S),  # ran long enough: a fresh failure
])
def test_restart_delay_backs_off_while_a_child_keeps_dying_young(previous, ran_for, expected):
    assert restart_delay_s(previous, ran_for) == expected


@pytest.mark.parametrize("changes, expected", [
    ({}, (4, None)),
    ({"advertised_listeners": "internal:pulsar://127.0.0.1:6650"}, (1, "advertisedListeners names one broker's ports")),
    ({"http_port": 0}, (1, "a port of 0 (any) leaves the cluster's advertised port unknown")),
])
def test_without_workers_asked_for_one_per_core_unless_only_one_broker_can_serve_the_config(changes, expected):
    from broker.workers import workers_for

    assert workers_for(BrokerConfig(metadata_store_url="x://", **changes), 4) == expected
