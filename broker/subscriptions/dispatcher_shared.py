"""Shared and Key_Shared dispatchers: many consumers, each entry to exactly one of them.

Shared hands entries round robin to consumers that have permits and are
under their unacked-message limit. Positions to redeliver (negative acks,
ack timeouts, consumers that left) wait in a replay queue that is read before
new entries. Messages with a ``deliver_at_time`` in the future are held by
the delayed-delivery tracker and join the replay queue when due.

Key_Shared sends every key to one consumer (the selector maps key hashes to
consumers). To keep per-key order, an entry whose key already has older
entries waiting for replay waits too, and a consumer that joined recently
only receives entries older than the read position when it joined until the
mark-delete position passes that point.
"""

from __future__ import annotations

import asyncio

from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.delayed_delivery import DelayedDeliveryTracker
from broker.subscriptions.dispatcher import Dispatcher, now_ms
from broker.subscriptions.key_shared import (
    ConsistentHashingSelector, RecentlyJoined, StickyRangesSelector, assign_entries, select_replay, sticky_key_hash,
)
from broker.subscriptions.redelivery import ReplayQueue
from broker.subscriptions.shared import RoundRobinSelector, UnackedLimits
from storage.managed_ledger import Position

NONE_KEY = b"NONE_KEY"


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


class KeySharedDispatcher(SharedDispatcher):
    """Key_Shared: each key to one consumer; entries a busy consumer cannot take wait in the replay queue.

    Reading: waiting entries whose consumer can take them now come first
    (``select_replay``); when none can, new entries are read from the cursor so
    the other consumers keep receiving, until the replay queue holds
    ``look_ahead_limit()`` entries (Pulsar's look-ahead thresholds). The replay
    queue knows each waiting entry's key hash, so a newer entry of a key never
    overtakes an older one, whoever holds it.
    """

    def __init__(self, subscription, max_read_batch_size: int = 100, *, delayed_delivery: bool = True,
                 points_per_consumer: int = 100, clock=now_ms, look_ahead_per_consumer: int = 2000,
                 look_ahead_per_subscription: int = 20_000):
        super().__init__(subscription, max_read_batch_size, delayed_delivery=delayed_delivery, clock=clock)
        self.points_per_consumer = points_per_consumer
        self.look_ahead_per_consumer = look_ahead_per_consumer
        self.look_ahead_per_subscription = look_ahead_per_subscription
        self.selector = None
        ml = self.cursor.ml
        self.recently_joined = RecentlyJoined(lambda p: ml.position_after(Position(*p)))
        self._released_hashes: dict[tuple, int] = {}  # key hashes of positions a consumer gave back
        self._reading_replay = False

    def key_hash_of(self):
        def of(md) -> int:
            if md.HasField("ordering_key"):
                key = md.ordering_key
            elif md.HasField("partition_key"):
                key = md.partition_key.encode()
            else:
                key = NONE_KEY
            return sticky_key_hash(key)
        return of

    def look_ahead_limit(self) -> int:
        return min(self.look_ahead_per_consumer * max(len(self.consumers), 1), self.look_ahead_per_subscription)

    # ---- consumers -----------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        sticky = meta is not None and meta.keySharedMode == 1  # KeySharedMode.STICKY
        if self.selector is None:
            self.selector = StickyRangesSelector() if sticky else ConsistentHashingSelector(self.points_per_consumer)
        if sticky:
            self.selector.add_consumer(consumer, [(r.start, r.end) for r in meta.hashRanges])
        else:
            self.selector.add_consumer(consumer)
        if self.consumers and not (meta is not None and meta.allowOutOfOrderDelivery):
            self.recently_joined.add(consumer, tuple(self.cursor.ml.normalize(self.cursor.read_position)))
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> list:
        if self.selector is not None:
            self.selector.remove_consumer(consumer)
        self.recently_joined.remove(consumer)
        self._remember_hashes(consumer, consumer.pending.positions())
        return super().remove_consumer(consumer)

    def _remember_hashes(self, consumer: Consumer, positions) -> None:
        for p in positions:
            key_hash = consumer.pending.key_hash(p)
            if key_hash is not None:
                self._released_hashes[tuple(p)] = key_hash

    def on_ack(self) -> None:
        self.recently_joined.prune(tuple(self.cursor.mark_delete_position))
        super().on_ack()

    def forget_queued(self) -> None:
        super().forget_queued()
        self._released_hashes.clear()

    # ---- reading -------------------------------------------------------------

    def _budgets(self) -> dict:
        return {c: c.permits if c.can_take() else 0 for c in self.consumers}

    async def read(self, count: int):
        positions = []
        if len(self.replay) and self.selector is not None:
            positions = select_replay(self.replay.items(), self.selector, self._budgets(), count,
                                      recently_joined=self.recently_joined,
                                      mark_delete_position=tuple(self.cursor.mark_delete_position))
        if positions:
            for p in positions:
                self.replay.discard(p)
            self._reading_replay = True
            return await self.subscription.read_positions(positions)
        self._reading_replay = False
        if len(self.replay) >= self.look_ahead_limit():
            await self._wakeup.wait()  # full: wait until permits or acks let waiting entries go
            return None
        return await self.read_tail(count)

    def dispatch(self, entries) -> bool:
        from_replay, self._reading_replay = self._reading_replay, False
        out = self.hold_delayed(self.entries_to_send(entries, self.key_hash_of()))
        if not out:
            return bool(entries)
        sent = self._assign(out, from_replay)
        # New entries that only moved to the replay queue are progress too: read on for the other consumers.
        return sent or (not from_replay and len(self.replay) < self.look_ahead_limit())

    def hand_out(self, out: list[DispatchedEntry]) -> bool:
        return self._assign(out, True)

    def _assign(self, out: list[DispatchedEntry], from_replay: bool) -> bool:
        if self.selector is None or not self.consumers:
            for e in out:
                self.replay.add(e.position, e.key_hash)
            return False
        result = assign_entries(out, self.selector, self._budgets(), recently_joined=self.recently_joined,
                                mark_delete_position=tuple(self.cursor.mark_delete_position),
                                waiting_since=self.replay.earliest_by_key_hash(), replay=from_replay)
        for consumer, entries in result.by_consumer.items():
            consumer.deliver(entries)
            self.subscription.record_out(entries)
        for e in result.replay_later:
            self.replay.add(e.position, e.key_hash)
        return bool(result.by_consumer)

    # ---- redelivery ----------------------------------------------------------

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        self._remember_hashes(consumer, consumer.pending.positions() if positions is None else positions)
        await super().redeliver(consumer, positions)

    async def redeliver_released(self, positions) -> None:
        for p in positions:
            key = tuple(p)
            self.redelivery.increment(key)
            self.replay.add(key, self._released_hashes.pop(key, None))
        self.wake()
