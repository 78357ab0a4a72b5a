"""The multi-process standalone's pure decisions (broker/workers.py): each worker's listeners, restart delays."""

from __future__ import annotations

import itertools
import re
import socket

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


def test_several_workers_share_one_small_add_beacon_and_a_worker_alone_keeps_none():
    config = BrokerConfig(metadata_store_url="file:///d/metadata", port=6650, http_port=8080)
    plans = plan_workers(config, 3, URL, ports(), small_add_beacon_path="/d/small-adds.beacon")
    assert {p.small_add_beacon_path for p in plans} == {"/d/small-adds.beacon"}
    assert plans[1].ledger_client_fields()["small_add_beacon_path"] == "/d/small-adds.beacon"
    assert plan_workers(config, 1, URL, ports(), small_add_beacon_path="/d/b")[0].small_add_beacon_path is None


def test_a_listener_that_is_off_stays_off_on_every_worker_and_tls_gets_its_own_ports():
    config = BrokerConfig(metadata_store_url="x://", port=None, http_port=8080, tls_port=6651, https_port=8443,
                          stream_port=None)
    plans = plan_workers(config, 2, URL, ports())
    assert (plans[1].port, plans[1].http_port, plans[1].tls_port, plans[1].https_port) == (None, 40000, 40001, 40002)
    assert (plans[0].tls_port, plans[0].https_port) == (6651, 8443)


@pytest.mark.parametrize("picks, expected", [
    ([40000, 40001, 40002, 40003], [(40000, 40001), (40002, 40003)]),
    ([40000, 40000, 40001, 40002, 40003], [(40000, 40001), (40002, 40003)]),  # a repeat of the worker's own
    ([40000, 40001, 40001, 40000, 40002, 40003], [(40000, 40001), (40002, 40003)]),  # of another worker's
    ([6650, 8080, 4181, 40000, 40001, 40002, 40003], [(40000, 40001), (40002, 40003)]),  # of worker 0's
])
def test_every_port_of_the_plan_is_distinct_even_when_a_pick_repeats(picks, expected):
    config = BrokerConfig(metadata_store_url="x://", port=6650, http_port=8080, stream_port=4181)
    plans = plan_workers(config, 3, URL, iter(picks).__next__)
    assert [(p.port, p.http_port) for p in plans[1:]] == expected


def test_a_plan_that_finds_no_distinct_port_says_so():
    config = BrokerConfig(metadata_store_url="x://", port=6650, http_port=8080)
    with pytest.raises(ValueError, match="no free port distinct from the plan's"):
        plan_workers(config, 2, URL, lambda: 6650)


def test_worker_ports_avoid_the_bookies_ports_which_are_not_bound_yet_when_the_plan_is_made():
    config = BrokerConfig(metadata_store_url="x://", port=6650, http_port=8080)
    picks = iter([3181, 40000, 3183, 40001])
    plans = plan_workers(config, 2, URL, picks.__next__, avoid=[3181, 3182, 3183])
    assert (plans[1].port, plans[1].http_port) == (40000, 40001)


@pytest.mark.parametrize("picks, avoid, expected", [
    ([40000, 40001, 40002], (), [40000, 40001, 40002]),
    ([3182, 40000, 40000, 40001, 3181, 40002], (), [40000, 40001, 40002]),  # a sibling's port, a repeat
    ([6650, 40000, 8080, 40001, 40002], (6650, 8080, None), [40000, 40001, 40002]),  # the broker's
])
def test_bookie_http_ports_picked_for_the_standalone_are_distinct_from_every_planned_port(tmp_path, picks, avoid,
                                                                                          expected):
    from broker.standalone_layout import standalone_bookie_configs

    configs = standalone_bookie_configs(tmp_path, "memory://x", 3181, pick_port=iter(picks).__next__, avoid=avoid)
    assert [(c.port, c.http_port) for c in configs] == list(zip([3181, 3182, 3183], expected))


def test_held_ports_are_distinct_and_bound_until_released():
    from broker.standalone_layout import HeldPorts

    held = HeldPorts()
    picked = [held() for _ in range(20)]
    assert len(set(picked)) == 20
    with socket.socket() as s, pytest.raises(OSError):
        s.bind(("127.0.0.1", picked[0]))
    held.release()
    with socket.socket() as s:
        s.bind(("127.0.0.1", picked[0]))


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


@pytest.mark.parametrize("count, quorums, message", [
    (3, (2, 2, 2), None),
    (4, (3, 2, 2), None),
    (1, (1, 1, 1), None),  # Pulsar's own standalone layout, on one bookie
    (26, (2, 2, 2), None),
    (1, (2, 2, 2), "--bookies 1 is fewer than the ledger ensemble size"),
    (2, (3, 3, 2), "run --bookies 3 or more, or lower E/Qw/Qa (now 3/3/2)"),
    (0, (1, 1, 1), "--bookies must be between 1 and 26, not 0"),
    (27, (2, 2, 2), "--bookies must be between 1 and 26, not 27"),
])
def test_the_bookie_count_must_hold_an_ensemble(count, quorums, message):
    from broker.standalone_layout import check_bookie_count

    e, qw, qa = quorums
    config = BrokerConfig(metadata_store_url="x://", managed_ledger_ensemble_size=e, managed_ledger_write_quorum=qw,
                          managed_ledger_ack_quorum=qa).validate()
    if message is None:
        check_bookie_count(count, config)
    else:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_bookie_count(count, config)


def test_more_bookies_get_the_next_letters_ports_and_the_three_zones_in_turn(tmp_path):
    from broker.standalone_layout import standalone_bookie_configs

    configs = standalone_bookie_configs(tmp_path, "memory://x", 3181, first_http_port=8000, count=5)
    assert [(c.bookie_id, c.data_dir.name, c.port, c.http_port, c.network_location) for c in configs] == [
        ("standalone-bookie-a", "bookie-a", 3181, 8000, "/zone-a/ud0"),
        ("standalone-bookie-b", "bookie-b", 3182, 8001, "/zone-b/ud1"),
        ("standalone-bookie-c", "bookie-c", 3183, 8002, "/zone-c/ud2"),
        ("standalone-bookie-d", "bookie-d", 3184, 8003, "/zone-a/ud3"),
        ("standalone-bookie-e", "bookie-e", 3185, 8004, "/zone-b/ud4")]
    assert len(standalone_bookie_configs(tmp_path, "memory://x", 3181)) == 3


def test_bookie_directories_of_an_earlier_larger_run_are_named(tmp_path):
    from broker.workers import missing_bookie_dirs

    for name in ("bookie-a", "bookie-b", "bookie-c", "bookie-d", "metadata"):
        (tmp_path / name).mkdir()
    assert missing_bookie_dirs(tmp_path, 2) == ["bookie-c", "bookie-d"]
    assert missing_bookie_dirs(tmp_path, 4) == []
