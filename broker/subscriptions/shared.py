"""Shared subscriptions: which consumer takes the next message, and when unacked limits block dispatch.

Round robin with priority levels (Pulsar's ``getNextConsumer``): consumers
are kept ordered by priority level (0 is the best; ties in connection order)
and a cursor points just after the consumer served last. A consumer at a
better level than the cursor's always goes first (the first available one);
within the cursor's level consumers take turns; a worse level is used only
when no consumer of the cursor's level can take anything. A consumer can take
messages when it has flow permits (> 0) and is not blocked by its unacked
limit.

Unacked limits have hysteresis, as in Pulsar: a consumer is blocked once its
unacknowledged messages reach ``max_unacked_messages_per_consumer`` and
unblocked when acks bring them down to half (``<= max // 2``); the
subscription (dispatcher) is blocked once all its consumers together reach
``max_unacked_messages_per_subscription`` and unblocked below half
(``< max // 2``). A limit of 0 means unlimited and unblocks at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

C = TypeVar("C")

DEFAULT_MAX_UNACKED_MESSAGES_PER_CONSUMER = 50_000
DEFAULT_MAX_UNACKED_MESSAGES_PER_SUBSCRIPTION = 200_000


def consumer_can_take(consumer) -> bool:
    """Pulsar's availability test: permits left and not blocked on unacked messages."""
    return consumer.permits > 0 and not getattr(consumer, "blocked", False)


def _priority(consumer) -> int:
    return getattr(consumer, "priority_level", 0)


class RoundRobinSelector:
    """The round-robin cursor of one Shared dispatcher.

    ``consumers`` may be passed in connection order; they are ordered by
    priority level (stable) on each call. The cursor is an index into that
    order, as in Pulsar, so adding or removing a consumer may shift whose turn
    it is by one; fairness over time is what matters.
    """

    def __init__(self) -> None:
        self._cursor = 0  # index of the consumer whose turn it is

    def reset(self) -> None:
        self._cursor = 0

    def next(self, consumers: Sequence[C], can_take: Callable[[C], bool] = consumer_can_take) -> C | None:
        """The consumer to serve next, advancing the cursor past it; None (cursor unchanged) when none can take."""
        if not consumers:
            return None
        ordered = sorted(consumers, key=_priority)
        n = len(ordered)
        if self._cursor >= n:
            self._cursor = 0
        i = self._pick(ordered, self._cursor, can_take)
        if i < 0:
            return None
        self._cursor = i + 1
        return ordered[i]

    @staticmethod
    def _pick(ordered: Sequence[C], cursor: int, can_take: Callable[[C], bool]) -> int:
        level = _priority(ordered[cursor])
        # 1. a better level than the cursor's: its first available consumer
        for i in range(cursor):
            if _priority(ordered[i]) >= level:
                break
            if can_take(ordered[i]):
                return i
        # 2. the cursor's level, round robin from the cursor, wrapping within the level
        first = next(i for i in range(len(ordered)) if _priority(ordered[i]) == level)
        end = first
        while end < len(ordered) and _priority(ordered[end]) == level:
            end += 1
        size = end - first
        for step in range(size):
            i = first + (cursor - first + step) % size
            if can_take(ordered[i]):
                return i
        # 3. worse levels: the first available consumer
        for i in range(end, len(ordered)):
            if can_take(ordered[i]):
                return i
        return -1


@dataclass(frozen=True)
class UnackedLimits:
    """The unacked-message limits of a Shared or Key_Shared subscription; 0 means unlimited."""

    max_unacked_messages_per_consumer: int = DEFAULT_MAX_UNACKED_MESSAGES_PER_CONSUMER
    max_unacked_messages_per_subscription: int = DEFAULT_MAX_UNACKED_MESSAGES_PER_SUBSCRIPTION

    def validate(self) -> None:
        """Raises ValueError for a negative limit."""
        if self.max_unacked_messages_per_consumer < 0 or self.max_unacked_messages_per_subscription < 0:
            raise ValueError("unacked-message limits must be >= 0 (0 = unlimited)")

    def consumer_blocked(self, was_blocked: bool, unacked_messages: int) -> bool:
        """Whether a consumer holding ``unacked_messages`` is blocked, given whether it was."""
        limit = self.max_unacked_messages_per_consumer
        if limit <= 0:
            return False
        if was_blocked:
            return unacked_messages > limit // 2
        return unacked_messages >= limit

    def subscription_blocked(self, was_blocked: bool, unacked_messages: int) -> bool:
        """Whether the subscription's dispatcher, with ``unacked_messages`` over all consumers, is blocked."""
        limit = self.max_unacked_messages_per_subscription
        if limit <= 0:
            return False
        if was_blocked:
            return unacked_messages >= limit // 2
        return unacked_messages >= limit
