"""Delayed delivery with a fake clock."""

from __future__ import annotations

import pytest

from broker.subscriptions import SubscriptionType
from broker.subscriptions.delayed_delivery import DelayedDeliveryTracker, delayed_delivery_applies


class FakeClock:
    def __init__(self, now_ms: int = 1_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.mark.parametrize("tick_ms, deliver_at, held", [
    (0, 999, False),    # in the past: deliver now
    (0, 1_000, False),  # due exactly now
    (0, 1_001, True),
    (0, -5, False),
    (100, 1_100, False),  # within one tick counts as due (non-strict mode)
    (100, 1_101, True),
])
def test_add_holds_only_future_messages(tick_ms, deliver_at, held):
    tracker = DelayedDeliveryTracker(FakeClock(), tick_ms=tick_ms)
    assert tracker.add((1, 0), deliver_at) is held
    assert tracker.contains((1, 0)) is held and len(tracker) == int(held)


def test_due_positions_come_out_in_position_order_when_their_time_comes():
    clock = FakeClock(1_000)
    tracker = DelayedDeliveryTracker(clock)
    for position, at in [((1, 3), 2_000), ((1, 1), 3_000), ((1, 0), 2_000), ((2, 0), 1_500), ((1, 2), 9_000)]:
        assert tracker.add(position, at)
    assert tracker.next_delivery_ms() == 1_500
    assert tracker.due() == [] and not tracker.has_due()
    clock.now_ms = 2_999
    assert tracker.has_due()
    assert tracker.due() == [(1, 0), (1, 3), (2, 0)]
    assert tracker.next_delivery_ms() == 3_000 and len(tracker) == 2
    assert tracker.due(now_ms=3_000) == [(1, 1)]
    assert (1, 2) in tracker and tracker.next_delivery_ms() == 9_000
    tracker.clear()
    assert len(tracker) == 0 and tracker.next_delivery_ms() is None and tracker.due(now_ms=10**12) == []


def test_due_with_a_limit_takes_the_earliest_deadlines():
    clock = FakeClock(0)
    tracker = DelayedDeliveryTracker(clock)
    for position, at in [((1, 0), 30), ((1, 1), 10), ((1, 2), 20), ((1, 3), 10)]:
        tracker.add(position, at)
    clock.now_ms = 100
    assert tracker.due(limit=3) == [(1, 1), (1, 2), (1, 3)]
    assert tracker.due(limit=3) == [(1, 0)]


def test_a_held_position_keeps_its_first_time():
    clock = FakeClock(0)
    tracker = DelayedDeliveryTracker(clock)
    assert tracker.add((1, 0), 50) and tracker.add((1, 0), 10)
    assert len(tracker) == 1 and tracker.due(now_ms=20) == [] and tracker.due(now_ms=50) == [(1, 0)]


@pytest.mark.parametrize("sub_type, applies", [
    (SubscriptionType.Exclusive, False),
    (SubscriptionType.Failover, False),
    (SubscriptionType.Shared, True),
    (SubscriptionType.Key_Shared, True),
])
def test_delayed_delivery_only_for_shared_types(sub_type, applies):
    assert delayed_delivery_applies(sub_type) is applies


def test_negative_tick_refused():
    with pytest.raises(ValueError):
        DelayedDeliveryTracker(FakeClock(), tick_ms=-1)
