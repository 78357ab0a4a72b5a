"""A subscription: a cursor on the topic's managed ledger, its consumers and its dispatcher.

The first consumer fixes the subscription type; later consumers must match
it (Exclusive admits one consumer, the others any number). Acknowledgements
move the cursor: individual acks delete single entries (or single messages
of a batch, when the client acks batch indexes), cumulative acks move the
mark-delete position. A durable subscription outlives its consumers; a
non-durable one (a reader) ends with its last consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.errors import ConsumerBusyError, NotAllowedError, SubscriptionNotFoundError, persistence_errors
from broker.subscriptions import SubscriptionType
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.key_shared import KeySharedDispatcher
from broker.subscriptions.shared import SharedDispatcher
from broker.subscriptions.single_active import SingleActiveConsumerDispatcher
from storage.managed_ledger import Position

log = logging.getLogger(__name__)


def bitset_to_longs(bits: list[int] | set[int], size: int) -> list[int]:
    """Indexes -> java.util.BitSet long array (signed 64-bit words, little-endian bit order)."""
    words = [0] * ((size + 63) // 64)
    for i in bits:
        words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def longs_to_mask(words, size: int) -> int:
    """The bits of a long-array bitset below ``size`` as one int (bit i = batch index i), in O(words)."""
    mask = 0
    for wi, w in enumerate(words[: (size + 63) // 64]):
        mask |= (w & 0xFFFF_FFFF_FFFF_FFFF) << (64 * wi)
    return mask & ((1 << size) - 1) if mask.bit_length() > size else mask


def acked_indexes(mask: int, size: int):
    """The batch indexes below ``size`` whose bit in ``mask`` (the still-unacknowledged ones) is clear, in
    O(size / 8) -- a byte at a time, so a 100,000-message batch costs no more than its bitmap."""
    raw = (~mask & ((1 << size) - 1)).to_bytes((size + 7) // 8, "little")
    for bi, byte in enumerate(raw):
        while byte:
            low = byte & -byte
            yield bi * 8 + low.bit_length() - 1
            byte ^= low


class Subscription:
    def __init__(self, topic, name: str, cursor, *, durable: bool = True):
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.type: SubscriptionType | None = None
        self.dispatcher = None
        self.msg_out = 0
        self.bytes_out = 0
        self.closed = False
        self.idle_since = time.monotonic()  # when its last consumer left (subscription expiry)
        self._resetting: asyncio.Future | None = None

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher else []

    # ---- consumers -------------------------------------------------------

    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        """Attach a consumer. Raises ConsumerBusyError when the type or exclusivity forbids it."""
        if self.closed:
            raise SubscriptionNotFoundError(f"subscription {self.name} is closed")
        if self.dispatcher is not None and self.dispatcher.consumers:
            if sub_type != self.type:
                raise ConsumerBusyError(
                    f"subscription {self.name} is of type {self.type.name}; a {sub_type.name} consumer cannot join"
                )
            if sub_type is SubscriptionType.Exclusive:
                raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name}")
            limit = self.topic.limit("max_consumers_per_subscription")
            if limit and len(self.dispatcher.consumers) >= limit:
                raise ConsumerBusyError(f"subscription {self.name} reached its limit of {limit} consumers")
        if self.dispatcher is None or sub_type != self.type:
            self._new_dispatcher(sub_type, consumer.partition_index)
        shared = sub_type in (SubscriptionType.Shared, SubscriptionType.Key_Shared)
        consumer.max_unacked_messages = self.topic.limit("max_unacked_messages_per_consumer") if shared else 0
        self.dispatcher.add_consumer(consumer)
        if self.topic.terminated and not self.cursor.has_more_entries():
            consumer.reached_end_of_topic()

    def _new_dispatcher(self, sub_type: SubscriptionType, partition_index: int) -> None:
        old = self.dispatcher
        if old is not None:
            self.topic.spawn(old.close())
        config = self.topic.config
        batch = config.dispatcher_max_read_batch_size
        if sub_type is SubscriptionType.Shared:
            self.dispatcher = SharedDispatcher(self, batch, delayed_delivery=config.delayed_delivery_enabled)
        elif sub_type is SubscriptionType.Key_Shared:
            self.dispatcher = KeySharedDispatcher(
                self, batch, delayed_delivery=config.delayed_delivery_enabled,
                points_per_consumer=config.subscription_key_shared_consistent_hashing_points,
                look_ahead_per_consumer=config.key_shared_look_ahead_msg_in_replay_threshold_per_consumer,
                look_ahead_per_subscription=config.key_shared_look_ahead_msg_in_replay_threshold_per_subscription,
            )
        else:
            self.dispatcher = SingleActiveConsumerDispatcher(
                self, batch, partition_index, failover=sub_type is SubscriptionType.Failover)
        self.dispatcher.max_read_bytes = config.dispatcher_max_read_size_bytes
        self.dispatcher.rate_limits = self.topic.rates.for_subscription(self.name)
        self.dispatcher.reads_in_flight = getattr(self.topic.service, "reads_in_flight", None)
        self.type = sub_type

    async def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is None:
            return
        released = self.dispatcher.remove_consumer(consumer)
        if not self.dispatcher.consumers:
            self.idle_since = time.monotonic()
        if released and self.type in (SubscriptionType.Shared, SubscriptionType.Key_Shared):
            await self.dispatcher.redeliver_released(released)
        if not self.dispatcher.consumers and not self.durable:
            await self.topic.remove_subscription(self.name)

    def flow(self, consumer: Consumer, permits: int) -> None:
        self.dispatcher.flow(consumer, permits)

    # ---- acks ------------------------------------------------------------

    async def acknowledge(self, consumer: Consumer, cumulative: bool, ids: list[tuple[Position, list[int] | None, int]],
                          *, receipt: bool = False) -> None:
        """Apply acks. ``ids`` holds (position, ack_set or None, batch_size); ack_set bits mark messages still unacked.

        An ack the client waits a receipt for (a request id) returns once it is durable; any other is written
        under the mark-delete rate (storage/managed_ledger/mark_delete_rate.py) and may return before."""
        if cumulative:
            self.check_cumulative()
            with persistence_errors(f"ack on {self.name} failed"):
                await self._ack_cumulative(consumer, *ids[-1], throttle=not receipt)
            self.dispatcher.on_ack()
            return
        self.ack_individual_now(consumer, ids)
        await self.acks_applied(receipt=receipt)

    def check_cumulative(self) -> None:
        if self.type in (SubscriptionType.Shared, SubscriptionType.Key_Shared):
            raise NotAllowedError(f"cumulative ack is not allowed on a {self.type.name} subscription")

    def ack_individual_now(self, consumer: Consumer, ids) -> None:
        """The in-memory part of individual acks (``ids`` as for ``acknowledge``): the cursor, the consumer's
        pending entries and the redelivery queue change now, before any await, so a redelivery decided
        meanwhile -- e.g. the consumer closing right after acking -- already sees them. One ACK may be applied
        in several calls; ``acks_applied`` then makes them durable together."""
        whole, partial = [], []
        for position, ack_set, batch_size in ids:
            if ack_set is not None:
                batch_size = self._batch_size(consumer, position, ack_set, batch_size)
                if batch_size <= 0:
                    continue  # we cannot tell which messages were meant: keep the entry (at-least-once)
                remaining = longs_to_mask(ack_set, batch_size)
                if remaining:
                    partial.append((position, remaining, batch_size))
                    continue
            whole.append(position)
        with persistence_errors(f"ack on {self.name} failed"):
            self.cursor.apply_deletes(whole, [(p, ~remaining & ((1 << size) - 1), size)
                                              for p, remaining, size in partial])
        pending = consumer.pending
        for position, remaining, batch_size in partial:
            if pending.batch_size(position):  # tracked: batch_size is the one dispatched
                pending.ack_batch_indexes(position, acked_indexes(remaining, batch_size))
            if self.cursor.is_deleted(position):
                self._forget(consumer, position)
        for position in whole:
            self._forget(consumer, position)

    async def acks_applied(self, *, receipt: bool = False) -> None:
        """What ``ack_individual_now`` applied, made durable (with a receipt) or written under the mark-delete
        rate (without); then the dispatcher may send what the acks freed."""
        with persistence_errors(f"ack on {self.name} failed"):
            await self.cursor.persist_acks(throttle=not receipt)
        self.dispatcher.on_ack()

    def _batch_size(self, consumer: Consumer, position, ack_set: list[int], claimed: int) -> int:
        """The batch size an ack's bitset is read against: what the broker dispatched when it tracked the entry
        (the official C++ client sends the bitset without one), else the client's claim, bounded like a
        published batch's count and by the bits the bitset itself carries (64 per long, as a client writes a
        batch's bitset) -- a client cannot make the broker build a 2^31-message batch, nor keep 100,000 bits of
        state for each entry it names with a one-long bitset."""
        known = consumer.pending.batch_size(position)
        if known:
            return known
        return min(max(claimed, 0), 64 * len(ack_set), self.topic.config.max_num_messages_in_batch)

    async def _ack_cumulative(self, consumer: Consumer, position: Position, ack_set, batch_size, throttle: bool) -> None:
        if ack_set is not None:
            batch_size = self._batch_size(consumer, position, ack_set, batch_size)
        partial = None
        remaining = longs_to_mask(ack_set, batch_size) if ack_set is not None and batch_size > 0 else 0
        if remaining:
            # Part of this batch is acked: ack those indexes, and everything before the entry in full.
            partial = self.cursor.delete_batch_mask(position, ~remaining & ((1 << batch_size) - 1), batch_size,
                                                   throttle=throttle)
            position = Position(position.ledger_id, position.entry_id - 1) if position.entry_id > 0 else None
        if position is not None and position > self.cursor.mark_delete_position:
            await self.cursor.mark_delete(position, throttle=throttle)
        if partial is not None:
            await partial
        if position is None:
            return
        for p in consumer.pending.remove_up_to(position):
            self.dispatcher.redelivery.remove(p)

    def _forget(self, consumer: Consumer, position) -> None:
        consumer.pending.remove(position)
        self.dispatcher.redelivery.remove(position)

    def ack_set_for(self, entry) -> list[int] | None:
        """For a batch partly acked by batch index: the bitset of messages still to deliver."""
        acked = self.cursor.batch_deleted_indexes(entry.position)
        if not acked:
            return None
        return bitset_to_longs(set(range(entry.num_messages)) - set(acked), entry.num_messages)

    def limits_changed(self) -> None:
        """The topic's policies changed: connected consumers take the new unacked-messages limit."""
        if self.type not in (SubscriptionType.Shared, SubscriptionType.Key_Shared):
            return
        for consumer in self.consumers:
            consumer.max_unacked_messages = self.topic.limit("max_unacked_messages_per_consumer")
            consumer.acked()  # re-judges blocking against the new limit
        if self.dispatcher is not None:
            self.dispatcher.wake()

    def dispatcher_moved(self) -> None:
        """An admin move of the mark-delete position (skip, clear-backlog, expiry, eviction): what consumers hold
        up to it counts as acknowledged, and the dispatcher goes on from there."""
        if self.dispatcher is None:
            return
        for consumer in self.consumers:
            for p in consumer.pending.remove_up_to(self.cursor.mark_delete_position):
                self.dispatcher.redelivery.remove(p)
        self.dispatcher.on_ack()

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        await self.dispatcher.redeliver(consumer, positions)

    # ---- position changes ------------------------------------------------

    async def reset(self, position: Position) -> None:
        """Seek: every consumer is closed, the cursor moves, and only then does the caller answer.

        Pulsar's order, which the official clients rely on: CLOSE_CONSUMER reaches the client before the
        seek's SUCCESS, so the client completes the seek only once it has subscribed again (the C++ client
        keeps a stale start id otherwise and drops what it is sent). Nothing read for the old position is
        dispatched afterwards: the dispatch loop is stopped and its queues cleared before the cursor moves,
        and consumers subscribing meanwhile wait for the reset (``settled``).
        """
        loop = asyncio.get_running_loop()
        resetting = self._resetting = loop.create_future()
        try:
            for consumer in self.consumers:
                self.dispatcher.remove_consumer(consumer)
                consumer.close()
            if self.dispatcher is not None:
                await self.dispatcher.stop_for_reset()
            with persistence_errors(f"reset of {self.name} failed"):
                await self.cursor.reset(position)
        finally:
            if self.dispatcher is not None:
                self.dispatcher.start()
            self._resetting = None
            resetting.set_result(None)

    async def settled(self) -> None:
        """Wait for a reset in progress, so a consumer never joins a half-moved subscription."""
        while self._resetting is not None:
            await asyncio.shield(self._resetting)

    async def read_positions(self, positions: list) -> list:
        return await self.topic.ml.read_entries_at(positions)

    # ---- stats -----------------------------------------------------------

    def record_out(self, entries) -> None:
        messages = nbytes = 0
        for e in entries:
            messages += e.num_messages
            nbytes += len(e.data)
        self.msg_out += messages
        self.bytes_out += nbytes
        self.topic.rates.dispatched(self.name, messages, nbytes)
        self.topic.record_out(entries)

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    def stats(self) -> dict:
        return {
            "type": self.type.name if self.type else None,
            "msgBacklog": self.backlog,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "isDurable": self.durable,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "consumers": [
                {
                    "consumerName": c.name, "availablePermits": c.permits, "unackedMessages": c.unacked_messages,
                    "blockedConsumerOnUnackedMsgs": c.blocked, "msgOutCounter": c.msg_out, "address": c.address,
                }
                for c in self.consumers
            ],
        }

    async def close(self, notify: bool = True) -> None:
        self.closed = True
        for consumer in self.consumers:
            consumer.close(notify)
        if self.dispatcher is not None:
            await self.dispatcher.close()
        if not self.durable:
            await self.cursor.close()
