"""The in-order acknowledgement rule and backoff, as pure decisions."""

import random

import pytest

from storage.client.backoff import Backoff
from storage.client.config import ClientConfig, with_changes
from storage.client.pending_add import AddQueue, PendingAdd


def add(eid, positions=(0, 1, 2), bookies=("b0", "b1", "b2")):
    a = PendingAdd(eid, b"body", 10 * (eid + 1), positions)
    for p in positions:
        a.sent(p, bookies[p])
    return a


def queue(n, qa=2):
    q = AddQueue(qa)
    adds = [add(i) for i in range(n)]
    for a in adds:
        q.push(a)
    return q, adds


def test_completes_only_with_ack_quorum():
    q, adds = queue(1)
    assert adds[0].record_ack(0, "b0")
    assert q.ready() == []
    adds[0].record_ack(2, "b2")
    assert [a.entry_id for a in q.ready()] == [0]
    assert len(q) == 0


def test_later_entry_waits_for_earlier_one():
    q, adds = queue(3)
    for p, b in ((0, "b0"), (1, "b1")):
        adds[1].record_ack(p, b)
        adds[2].record_ack(p, b)
    assert q.ready() == [], "entries 1 and 2 have quorum but entry 0 does not"
    adds[0].record_ack(1, "b1")
    adds[0].record_ack(2, "b2")
    assert [a.entry_id for a in q.ready()] == [0, 1, 2]


@pytest.mark.parametrize(
    "acks, done",
    [
        ({0: [0], 1: [0, 1]}, []),
        ({0: [0, 1], 1: [0]}, [0]),
        ({0: [0, 1], 1: [0, 2], 2: [1, 2]}, [0, 1, 2]),
        ({0: [0, 1], 2: [1, 2]}, [0]),
        ({1: [0, 1], 2: [0, 1], 3: [0, 1]}, []),
    ],
)
def test_table_of_ack_patterns(acks, done):
    q, adds = queue(4)
    for eid, positions in acks.items():
        for p in positions:
            adds[eid].record_ack(p, f"b{p}")
    assert [a.entry_id for a in q.ready()] == done


def test_hold_defers_completion_until_release():
    q, adds = queue(2)
    q.hold()
    for a in adds:
        a.record_ack(0, "b0")
        a.record_ack(1, "b1")
    assert q.ready() == []
    q.release()
    assert [a.entry_id for a in q.ready()] == [0, 1]
    with pytest.raises(RuntimeError):
        q.release()


def test_late_ack_from_replaced_bookie_is_ignored():
    a = add(0)
    a.sent(1, "b9")  # position 1 was given to a new bookie by an ensemble change
    assert not a.record_ack(1, "b1")
    assert a.acked == set()
    assert a.record_ack(1, "b9")


def test_resend_discards_the_old_ack_for_that_position():
    a = add(0)
    a.record_ack(1, "b1")
    a.sent(1, "b9")
    assert a.acked == set()


def test_adds_must_be_contiguous():
    q = AddQueue(1)
    q.push(add(5))
    with pytest.raises(ValueError):
        q.push(add(7))


def test_drain_returns_everything_pending():
    q, adds = queue(3)
    assert q.drain() == adds and len(q) == 0


def test_backoff_grows_caps_and_jitters_within_bounds():
    cfg = with_changes(ClientConfig(), backoff_initial_s=0.1, backoff_max_s=0.8, backoff_multiplier=2.0, backoff_jitter=0.0)
    b = Backoff(cfg, random.Random(1))
    assert [b.next_delay() for _ in range(5)] == [0.1, 0.2, 0.4, 0.8, 0.8]
    b.reset()
    assert b.next_delay() == 0.1
    jittery = Backoff(with_changes(cfg, backoff_jitter=0.5), random.Random(2))
    for expected in (0.1, 0.2, 0.4, 0.8, 0.8):
        assert expected * 0.5 <= jittery.next_delay() <= expected * 1.5


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(add_entry_timeout_s=0), "add_entry_timeout_s"),
        (dict(placement_mode="loose"), "placement mode"),
        (dict(min_zones_per_write_set=3, desired_zones_per_write_set=2), "desired_zones_per_write_set"),
        (dict(backoff_initial_s=2.0, backoff_max_s=1.0), "backoff_initial_s"),
        (dict(max_entry_bytes=9 * 1024 * 1024), "max_frame_bytes"),
        (dict(max_ensemble_change_attempts=0), "max_ensemble_change_attempts"),
    ],
)
def test_config_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        with_changes(ClientConfig(), **changes)


def test_default_config_is_valid_and_soft():
    cfg = ClientConfig().validate()
    assert cfg.placement.mode == "soft" and cfg.placement.min_zones_per_write_set == 2
