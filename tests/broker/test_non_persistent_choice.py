"""Which consumer of a non-persistent subscription gets a message, or whether it is dropped: tables, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.subscriptions import SubscriptionType as S
from broker.topics.non_persistent import choose_consumer


@dataclass(eq=False)
class C:
    name: str
    permits: int = 1
    priority_level: int = 0
    blocked: bool = False

    def can_take(self) -> bool:
        return self.permits > 0 and not self.blocked


a, b, c = C("a"), C("b"), C("c")
empty, idle = C("empty", permits=0), C("idle", permits=0)
low = C("low", priority_level=1)


@pytest.mark.parametrize("sub_type, consumers, next_shared, by_key, chosen, next_after", [
    (S.Exclusive, [], 0, None, None, 0),
    (S.Exclusive, [a], 0, None, a, 0),
    (S.Exclusive, [empty], 0, None, None, 0),               # no permits: dropped, not queued
    (S.Failover, [b, a], 0, None, a, 0),                    # the active one (by name), not the first to connect
    (S.Failover, [empty, b], 0, None, b, 0),
    (S.Failover, [C("a", permits=0), b], 0, None, None, 0),  # the active consumer is full: dropped
    (S.Shared, [a, b, c], 0, None, a, 1),
    (S.Shared, [a, b, c], 1, None, b, 2),
    (S.Shared, [a, b, c], 5, None, c, 6),
    (S.Shared, [empty, b], 0, None, b, 1),                   # skips the consumer without permits
    (S.Shared, [empty, idle], 3, None, None, 3),             # nobody can take it: dropped
    (S.Shared, [low, b], 0, None, b, 1),                     # the highest priority level first
    (S.Shared, [low, empty], 0, None, low, 1),
    (S.Key_Shared, [a, b], 0, b, b, 0),
    (S.Key_Shared, [a, empty], 0, empty, None, 0),           # the key's owner is full: dropped, not given to another
])
def test_choose_consumer(sub_type, consumers, next_shared, by_key, chosen, next_after):
    got, index = choose_consumer(sub_type, consumers, next_shared, selected_by_key=by_key)
    assert got is chosen
    assert index == next_after


def test_a_blocked_consumer_is_passed_over():
    blocked = C("x", blocked=True)
    assert choose_consumer(S.Shared, [blocked, a], 0) == (a, 1)
