"""Shared: round robin with priority levels, permits and blocked consumers; unacked-limit hysteresis."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, strategies as st

from broker.subscriptions.shared import RoundRobinSelector, consumer_can_take
from broker.subscriptions.unacked_limits import UnackedLimits


@dataclass(eq=False)
class C:
    name: str
    permits: int = 1_000
    priority_level: int = 0
    blocked: bool = False


def serve(selector, consumers, n, spend=True):
    """Names of up to ``n`` picks, each spending a permit; stops at the first None."""
    out = []
    for _ in range(n):
        c = selector.next(consumers)
        if c is None:
            out.append(None)
            break
        if spend:
            c.permits -= 1
        out.append(c.name)
    return out


def test_pulsar_documented_priority_example():
    # AbstractDispatcherMultipleConsumers.getNextConsumer's own example
    consumers = [C("C1", 2, 0), C("C2", 1, 0), C("C3", 1, 0), C("C4", 2, 1), C("C5", 1, 1)]
    assert serve(RoundRobinSelector(), consumers, 10) == ["C1", "C2", "C3", "C1", "C4", "C5", "C4", None]


@pytest.mark.parametrize("consumers, picks", [
    ([C("a"), C("b"), C("c")], ["a", "b", "c", "a", "b", "c"]),
    ([C("a"), C("b", permits=0), C("c")], ["a", "c", "a", "c"]),
    ([C("a"), C("b", blocked=True), C("c")], ["a", "c", "a", "c"]),
    ([C("a", permits=1), C("b", permits=3)], ["a", "b", "b", "b", None]),
    ([C("a", permits=0), C("b", blocked=True)], [None]),
    ([], [None]),
    # a worse priority level is used only while the better one is out of permits
    ([C("lo", priority_level=1), C("hi", permits=2)], ["hi", "hi", "lo", "lo"]),
    # given in connection order; ordered by priority level, ties in connection order
    ([C("x", priority_level=2), C("y", priority_level=1), C("z", priority_level=1)], ["y", "z", "y", "z"]),
])
def test_round_robin_table(consumers, picks):
    assert serve(RoundRobinSelector(), consumers, len(picks)) == picks


def test_round_robin_is_fair_over_time():
    consumers = [C(f"c{i}") for i in range(4)]
    picks = serve(RoundRobinSelector(), consumers, 400)
    assert all(picks.count(c.name) == 100 for c in consumers)
    assert picks[:8] == ["c0", "c1", "c2", "c3"] * 2


def test_better_priority_consumer_reclaims_when_it_gets_permits_back():
    hi, lo = C("hi", permits=0), C("lo", priority_level=1)
    rr = RoundRobinSelector()
    assert serve(rr, [hi, lo], 2) == ["lo", "lo"]
    hi.permits = 2
    assert serve(rr, [hi, lo], 3) == ["hi", "hi", "lo"]


def test_none_leaves_the_cursor_where_it_was():
    a, b = C("a"), C("b")
    rr = RoundRobinSelector()
    assert rr.next([a, b]) is a
    assert rr.next([a, b], lambda c: False) is None
    assert rr.next([a, b]) is b  # still b's turn


def test_cursor_survives_a_consumer_leaving():
    a, b, c = C("a"), C("b"), C("c")
    rr = RoundRobinSelector()
    assert serve(rr, [a, b, c], 3, spend=False) == ["a", "b", "c"]
    assert serve(rr, [a, c], 3, spend=False) == ["a", "c", "a"]


@pytest.mark.parametrize("permits, blocked, can", [(1, False, True), (0, False, False), (-3, False, False),
                                                     (5, True, False)])
def test_consumer_can_take(permits, blocked, can):
    assert consumer_can_take(C("x", permits=permits, blocked=blocked)) is can


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans()), min_size=1, max_size=8),
       st.integers(1, 60))
def test_round_robin_properties(specs, rounds):
    consumers = [C(f"c{i}", permits, level, blocked) for i, (permits, level, blocked) in enumerate(specs)]
    rr = RoundRobinSelector()
    for _ in range(rounds):
        available = [c for c in consumers if consumer_can_take(c)]
        picked = rr.next(consumers)
        if not available:
            assert picked is None
            break
        assert picked in available
        # nobody at a better priority level was skipped
        assert picked.priority_level == min(c.priority_level for c in available)
        picked.permits -= 1


# ---- unacked limits ---------------------------------------------------------------------------


def walk(decide, unacked_path, blocked=False):
    out = []
    for unacked in unacked_path:
        blocked = decide(blocked, unacked)
        out.append(blocked)
    return out


@pytest.mark.parametrize("limit, path, expected", [
    (10, [0, 9, 10, 8, 6, 5, 9, 10], [False, False, True, True, True, False, False, True]),
    (10, [12, 6, 5], [True, True, False]),         # dispatch may overshoot the limit
    (7, [7, 4, 3], [True, True, False]),            # half of an odd limit rounds down: <= 3
    (0, [0, 10**9], [False, False]),                # 0 = unlimited
    (1, [1, 0], [True, False]),
])
def test_consumer_unacked_hysteresis(limit, path, expected):
    limits = UnackedLimits(max_unacked_messages_per_consumer=limit)
    assert walk(limits.consumer_blocked, path) == expected


@pytest.mark.parametrize("limit, path, expected", [
    (10, [9, 10, 6, 5, 4, 9, 10], [False, True, True, True, False, False, True]),  # unblock strictly below half
    (7, [7, 3, 2], [True, True, False]),
    (0, [10**9], [False]),
])
def test_subscription_unacked_hysteresis(limit, path, expected):
    limits = UnackedLimits(max_unacked_messages_per_subscription=limit)
    assert walk(limits.subscription_blocked, path) == expected


def test_unacked_limit_defaults_are_pulsars():
    limits = UnackedLimits()
    assert limits.max_unacked_messages_per_consumer == 50_000
    assert limits.max_unacked_messages_per_subscription == 200_000
    assert limits.consumer_blocked(False, 50_000) and not limits.consumer_blocked(True, 25_000)
    assert limits.subscription_blocked(True, 99_999) is False and limits.subscription_blocked(True, 100_000)


def test_negative_limits_are_refused():
    with pytest.raises(ValueError):
        UnackedLimits(max_unacked_messages_per_consumer=-1).validate()
    UnackedLimits(0, 0).validate()
