"""Shared subscriptions: which consumer takes the next message, and when unacked limits block dispatch.

Round robin with priority levels (Pulsar's ``getNextConsumer``): consumers
are kept ordered by priority level (0 is the best; ties in connection order)
and a cursor points just after the consumer served last. A consumer at a
better level than the cursor's always goes first (the first available one);
within the cursor's level consumers take turns; a worse level is used only
when no consumer of the cursor's level can take anything. A consumer can take
messages when it has flow permits (> 0) and is not blocked by its unacked
limit (unacked_limits.py).

``SharedDispatcher`` (the I/O, at the end of this module) hands entries out
by that rule. Positions to redeliver (negative acks, ack timeouts, consumers
that left) wait in a replay queue that is read before new entries. Messages
with a ``deliver_at_time`` in the future are held by the delayed-delivery
tracker and join the replay queue when due. Key_Shared's dispatcher extends
it (key_shared.py).
"""

from __future__ import annotations

import asyncio
from typing import Callable, Sequence, TypeVar

from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.delayed_delivery import DelayedDeliveryTracker
from broker.subscriptions.dispatcher import Dispatcher, now_ms
from broker.subscriptions.redelivery import ReplayQueue
from broker.subscriptions.unacked_limits import UnackedLimits

C = TypeVar("C")


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


# ---- the dispatcher: I/O around the rules above ----------------------------------------------------------


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription, max_read_batch_size: int = 100, *, delayed_delivery: bool = True, clock=now_ms):
        super().__init__(subscription, max_read_batch_size)
        self.replay = ReplayQueue()
        self.delayed = DelayedDeliveryTracker(clock) if delayed_delivery else None
        self.clock = clock
        self.round_robin = RoundRobinSelector()
        self._blocked = False
        self._timer: asyncio.TimerHandle | None = None

    def takers(self) -> list[Consumer]:
        return [c for c in self.consumers if c.can_take()]

    def ready(self) -> bool:
        return bool(self.takers()) and not self.subscription_blocked()

    def subscription_blocked(self) -> bool:
        """The subscription-wide unacked limit, with Pulsar's hysteresis (blocked at the limit, free below half)."""
        limits = UnackedLimits(max_unacked_messages_per_subscription=self.subscription.topic.limit("max_unacked_messages_per_subscription"))
        self._blocked = limits.subscription_blocked(self._blocked, sum(c.unacked_messages for c in self.consumers))
        return self._blocked

    def read_count(self) -> int:
        permits = sum(max(c.permits, 0) for c in self.takers())
        return max(1, min(permits, self.max_read_batch_size))

    async def read(self, count: int):
        if len(self.replay):
            positions = self.replay.pop(count)
            await self.reserve_read(len(positions))
            return await self.subscription.read_positions(positions)
        return await self.read_tail(count)

    # ---- hand-out ------------------------------------------------------------

    def dispatch(self, entries) -> bool:
        out = self.hold_delayed(self.entries_to_send(entries, self.key_hash_of()))
        if not out:
            return bool(entries)  # everything was acked or delayed: keep reading
        return self.hand_out(out)

    def key_hash_of(self):
        return None

    def hand_out(self, out: list[DispatchedEntry]) -> bool:
        sent = False
        for e in out:
            consumer = self.round_robin.next(self.consumers, lambda c: c.can_take())
            if consumer is None:
                self.replay.add(e.position)
                continue
            consumer.deliver([e])
            self.subscription.record_out([e])
            sent = True
        return sent

    def hold_delayed(self, out: list[DispatchedEntry]) -> list[DispatchedEntry]:
        if self.delayed is None:
            return out
        now = self.clock()
        kept = []
        for e in out:
            md = e.metadata
            if md.HasField("deliver_at_time") and md.deliver_at_time > now and self.delayed.add(e.position, md.deliver_at_time):
                continue
            kept.append(e)
        self._arm_timer()
        return kept

    def _arm_timer(self) -> None:
        if self.delayed is None:
            return
        nxt = self.delayed.next_delivery_ms()
        if nxt is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, (nxt - self.clock()) / 1000), self._release_due)

    def _release_due(self) -> None:
        self._timer = None
        for position in self.delayed.due(self.clock()):
            self.replay.add(position)
        self._arm_timer()
        self.wake()

    # ---- redelivery ----------------------------------------------------------

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        released = consumer.pending.release_all() if positions is None else consumer.pending.release(positions)
        consumer.redeliveries += 1
        consumer.acked()
        await self.redeliver_released(released)

    async def redeliver_released(self, positions) -> None:
        for p in positions:
            self.redelivery.increment(p)
            self.replay.add(p)
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> list:
        released = super().remove_consumer(consumer)
        self.wake()
        return released

    def forget_queued(self) -> None:
        super().forget_queued()
        self.replay.clear()
        if self.delayed is not None:
            self.delayed.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        await super().close()
