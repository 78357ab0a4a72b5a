"""A non-persistent topic (``non-persistent://``): messages pass through the broker's memory, never storage.

A SEND is answered at once with a synthetic message id (ledger 0, an entry
number counting this topic's messages since it was loaded), after the message
was handed to every subscription. Each subscription gives it to one consumer
that has permits and a writable connection, chosen by the subscription's type;
when there is none the subscription drops it and counts the drop. There is no
cursor and no backlog: nothing is redelivered, acknowledgements change nothing,
and a subscription goes away with its last consumer. A broker restart or an
unload loses whatever was in flight, as in Pulsar.

A partitioned non-persistent topic is a partition count on record
(broker/http/non_persistent.py); each partition is one of these. Not supported
here: deduplication, seek.
"""

from __future__ import annotations

import itertools
import time
from typing import Sequence

from broker.errors import ConsumerBusyError, NotAllowedError, ProducerBusyError, TopicFencedError
from broker.subscriptions import SubscriptionType, detach_last_consumer
from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.key_shared import NONE_KEY, ConsistentHashingSelector, StickyRangesSelector, sticky_key_hash
from broker.subscriptions.single_active import choose_active_consumer
from broker.topics.producer import Producer, Verdict, admit
from broker.topics.rate_limits import RateMeter
from broker.topics.throttling import TopicRates
from magnetar.protocol.frames import parse_headers_and_payload
from magnetar.topic_name import TopicName
from storage.managed_ledger import Position

NO_POSITION = Position(-1, -1)
SYNTHETIC_LEDGER = 0


def choose_consumer(sub_type: SubscriptionType, consumers: Sequence, next_shared: int, *, partition_index: int = -1,
                    selected_by_key=None):
    """Which consumer gets the next message, as (consumer or None, next round-robin index).

    ``consumers`` are in connection order; a consumer that cannot take a message now (``can_take()`` false: no
    permits, blocked or its connection backed up) never gets it -- the message is dropped instead, since nothing
    keeps it for later. Exclusive and Failover: the active consumer. Shared: round robin among the highest
    priority level of those that can take. Key_Shared: ``selected_by_key`` (the key's owner)."""
    if not consumers:
        return None, next_shared
    if sub_type is SubscriptionType.Key_Shared:
        chosen = selected_by_key
    elif sub_type is SubscriptionType.Shared:
        ready = [c for c in consumers if c.can_take()]
        if not ready:
            return None, next_shared
        best = min(c.priority_level for c in ready)
        ready = [c for c in ready if c.priority_level == best]
        return ready[next_shared % len(ready)], next_shared + 1
    else:
        chosen = choose_active_consumer(consumers, partition_index)
    return (chosen if chosen is not None and chosen.can_take() else None), next_shared


def key_hash(metadata) -> int:
    if metadata.HasField("ordering_key"):
        return sticky_key_hash(metadata.ordering_key)
    if metadata.HasField("partition_key"):
        return sticky_key_hash(metadata.partition_key.encode())
    return sticky_key_hash(NONE_KEY)


class _NoCursor:
    """What the connection's ACK, stats and last-message-id code read of a subscription's cursor: here nothing is
    stored, so every acknowledged id is as good as any (none is counted as invented) and nothing is mark-deleted."""

    mark_delete_position = NO_POSITION
    reads_compacted = False

    @staticmethod
    def exists(position) -> bool:
        return True


class _NoDedup:
    enabled = False

    @staticmethod
    def last_sequence_id(producer_name: str) -> int:
        return -1


class NonPersistentSubscription:
    durable = False
    backlog = 0
    cursor = _NoCursor()
    dispatcher = None  # messages are handed out as they are published, not read by a dispatcher

    def __init__(self, topic: "NonPersistentTopic", name: str):
        self.topic = topic
        self.name = name
        self.type: SubscriptionType | None = None
        self.consumers: list[Consumer] = []
        self.selector = None  # Key_Shared
        self._next_shared = 0
        self._active: Consumer | None = None  # Failover: whom ACTIVE_CONSUMER_CHANGE last named
        self.msg_out = self.bytes_out = self.msg_dropped = 0
        self.drop_meter = RateMeter()
        self.closed = False

    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if self.consumers and sub_type is not self.type:
            raise ConsumerBusyError(f"subscription {self.name} is {self.type.name}; a {sub_type.name} consumer "
                                    f"cannot join it")
        if self.consumers and sub_type is SubscriptionType.Exclusive:
            raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name}")
        if sub_type is SubscriptionType.Key_Shared:
            meta = consumer.key_shared_meta
            sticky = meta is not None and meta.keySharedMode == 1  # KeySharedMode.STICKY
            if self.consumers and isinstance(self.selector, StickyRangesSelector) != sticky:
                raise ConsumerBusyError(f"Key_Shared consumers of subscription {self.name} use the other key mode")
            if not self.consumers:
                self.selector = StickyRangesSelector() if sticky else ConsistentHashingSelector()
            if sticky:
                self.selector.add_consumer(consumer, [(r.start, r.end) for r in meta.hashRanges])
            else:
                self.selector.add_consumer(consumer)
        consumer.track_pending_acks = False  # nothing can be redelivered, so nothing is held for it
        self.type = sub_type
        self.consumers.append(consumer)
        self._announce_active()

    def _announce_active(self) -> None:
        if self.type is not SubscriptionType.Failover:
            return
        active = choose_active_consumer(self.consumers, self.topic.name.partition_index)
        if active is not self._active:
            self._active = active
            for c in self.consumers:
                c.connection.out.active_consumer_change(c.consumer_id, c is active)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)

    def deliver(self, entry: DispatchedEntry, metadata) -> None:
        by_key = None
        if self.type is SubscriptionType.Key_Shared and self.selector is not None:
            by_key = self.selector.select(key_hash(metadata))
        consumer, self._next_shared = choose_consumer(
            self.type, self.consumers, self._next_shared, partition_index=self.topic.name.partition_index,
            selected_by_key=by_key)
        if consumer is None:
            self.msg_dropped += entry.num_messages
            self.drop_meter.record(entry.num_messages, len(entry.data))
            return
        consumer.deliver([entry])
        self.msg_out += entry.num_messages
        self.bytes_out += len(entry.data)

    async def remove_consumer(self, consumer: Consumer) -> list:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            if self.selector is not None:
                self.selector.remove_consumer(consumer)
            self._announce_active()
        if not self.consumers and self.topic.subscriptions.get(self.name) is self:
            del self.topic.subscriptions[self.name]  # no cursor to keep: it goes with its last consumer
            self.topic.last_active = time.monotonic()
        return []

    async def acknowledge(self, consumer: Consumer, cumulative: bool, ids, *, receipt: bool = False) -> None:
        pass  # nothing is stored or pending

    async def redeliver(self, consumer: Consumer, positions) -> None:
        pass  # what was delivered is gone from the broker

    async def reset(self, position) -> None:
        raise NotAllowedError(f"seek is not supported on the non-persistent topic {self.topic.name}")

    def stats(self) -> dict:
        return {
            "type": self.type.name if self.type else None,
            "msgBacklog": 0,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "msgDropped": self.msg_dropped,
            "msgDropRate": self.drop_meter.rate()[0],
            "isDurable": False,
            "unackedMessages": 0,
            "consumers": [
                {"consumerName": c.name, "availablePermits": c.permits, "msgOutCounter": c.msg_out,
                 "address": c.address}
                for c in self.consumers
            ],
        }

    async def close(self, notify: bool = True) -> None:
        self.closed = True
        for consumer in self.consumers:
            consumer.close(notify)
        self.consumers.clear()


class NonPersistentTopic:
    persistent = False
    storage_size = 0
    terminated = False

    def __init__(self, service, name: TopicName, policies, topic_policies=None):
        self.service = service
        self.name = name
        self.config = service.config
        self.policies = policies
        self.topic_policies = topic_policies
        self.producers: dict[Producer, None] = {}
        self._producer_names: dict[str, Producer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.dedup = _NoDedup()
        self.topic_epoch = 0
        self._entry_ids = itertools.count()
        self.last_id = NO_POSITION
        self.msg_in = self.bytes_in = self.msg_out = self.bytes_out = 0
        self.last_active = time.monotonic()
        self.closed = False
        self.closing_hooks: list = []
        self.rates = TopicRates(self)  # publish rate limits apply as on a persistent topic

    def limit(self, name: str):
        for source in (self.topic_policies, self.policies):
            value = getattr(source, name, None)
            if value is not None:
                return value
        return getattr(self.config, name, None)

    def apply_policies(self, policies) -> None:
        self.policies = policies
        self.rates.apply(policies, self.topic_policies)

    def apply_topic_policies(self, topic_policies) -> None:
        self.topic_policies = topic_policies
        self.rates.apply(self.policies, topic_policies)

    def _check_open(self) -> None:
        if self.closed:
            raise TopicFencedError(f"topic {self.name} is being unloaded; look it up again")

    # ---- producers -------------------------------------------------------

    async def add_producer(self, producer: Producer, requested_epoch: int | None) -> None:
        self._check_open()
        limit = self.limit("max_producers_per_topic")
        if limit and len(self.producers) >= limit:
            raise ProducerBusyError(f"topic {self.name} reached its limit of {limit} producers")
        if producer.user_provided_name and producer.name in self._producer_names:
            raise ProducerBusyError(f"producer with name {producer.name!r} is already connected to topic {self.name}")
        decision = admit(producer.access_mode, self.producers, self.topic_epoch, requested_epoch)
        if decision.verdict is Verdict.WAIT:
            raise ProducerBusyError(f"topic {self.name} has an exclusive producer; WaitForExclusive is not "
                                    f"supported on non-persistent topics")
        if decision.verdict is Verdict.FENCE_OTHERS:
            for other in list(self.producers):
                self.remove_producer(other)
                other.connection.out.close_producer(other.producer_id)
        if decision.new_epoch is not None:
            self.topic_epoch = producer.epoch = decision.new_epoch
        producer.ready = True
        self.producers[producer] = None
        self._producer_names[producer.name] = producer
        self.last_active = time.monotonic()
        return None

    def remove_producer(self, producer: Producer) -> None:
        self.producers.pop(producer, None)
        if self._producer_names.get(producer.name) is producer:
            del self._producer_names[producer.name]
        self.last_active = time.monotonic()

    def retire_if_idle(self, now: float, min_idle_s: float) -> bool:
        """With no producer and no subscription for ``min_idle_s`` the topic holds nothing: the broker forgets it
        (it comes back with the next producer or consumer), so topics clients once named do not pile up in memory.
        Only after a while idle, so a producer or consumer that is just attaching finds it still open."""
        if self.closed or self.producers or self.subscriptions or now - self.last_active < min_idle_s:
            return False
        self.closed = True
        self.rates.close()
        for hook in self.closing_hooks:
            hook()
        registry = self.service.non_persistent
        if registry.get(str(self.name)) is self:
            del registry[str(self.name)]
        return True

    async def publish(self, producer: Producer, sequence_id: int, highest_sequence_id: int,
                      num_messages: int, data: bytes) -> Position:
        """Hand one message (or batch) to every subscription now; returns its synthetic id."""
        self._check_open()
        self.last_active = time.monotonic()
        position = Position(SYNTHETIC_LEDGER, next(self._entry_ids))
        producer.record(num_messages, len(data))
        self.msg_in += num_messages
        self.bytes_in += len(data)
        self.last_id = position
        if self.subscriptions:
            metadata, _, _ = parse_headers_and_payload(data)
            entry = DispatchedEntry(tuple(position), data, num_messages)
            for sub in list(self.subscriptions.values()):
                before = sub.msg_out
                sub.deliver(entry, metadata)
                if sub.msg_out != before:
                    self.msg_out += num_messages
                    self.bytes_out += len(data)
        return position

    # ---- subscriptions ---------------------------------------------------

    async def subscribe(self, consumer: Consumer, sub_name: str, sub_type: SubscriptionType, *, durable: bool,
                        initial_position=None, start=None, start_inclusive: bool = False,
                        read_compacted: bool = False) -> NonPersistentSubscription:
        self._check_open()
        if read_compacted:
            raise NotAllowedError(f"read_compacted is not supported on the non-persistent topic {self.name}")
        limit = self.limit("max_consumers_per_topic")
        if limit and sum(len(s.consumers) for s in self.subscriptions.values()) >= limit:
            raise ConsumerBusyError(f"topic {self.name} reached its limit of {limit} consumers")
        self.last_active = time.monotonic()
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            sub = self.subscriptions[sub_name] = NonPersistentSubscription(self, sub_name)
        try:
            sub.add_consumer(consumer, sub_type)
        except BaseException:
            if not sub.consumers:
                self.subscriptions.pop(sub_name, None)
            raise
        return sub

    async def unsubscribe(self, sub_name: str, consumer: Consumer | None = None) -> None:
        await detach_last_consumer(self.name, self.subscriptions, sub_name, consumer)
        self.subscriptions.pop(sub_name, None)
        self.last_active = time.monotonic()

    # ---- what persistent topics answer from storage -------------------------

    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        return self.last_id, -1

    async def position_for_publish_time(self, publish_time_ms: int) -> Position:
        raise NotAllowedError(f"seek is not supported on the non-persistent topic {self.name}")

    def earliest_position(self) -> Position:
        raise NotAllowedError(f"seek is not supported on the non-persistent topic {self.name}")

    latest_position = earliest_position

    # ---- stats and lifecycle ---------------------------------------------

    def stats(self) -> dict:
        subs = {name: s.stats() for name, s in self.subscriptions.items()}
        return {
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "msgDropped": sum(s.msg_dropped for s in self.subscriptions.values()),
            "msgDropRate": sum(s["msgDropRate"] for s in subs.values()),
            "storageSize": 0,
            "msgBacklog": 0,
            "publishers": [
                {"producerName": p.name, "producerId": p.producer_id, "msgInCounter": p.msg_in,
                 "accessMode": p.access_mode.name, "address": getattr(p.connection, "remote_address", "")}
                for p in self.producers
            ],
            "subscriptions": subs,
            "topicEpoch": self.topic_epoch,
            **self.rates.stats(),
        }

    async def close(self, notify: bool = True) -> None:
        """Producers and consumers are told to look the topic up again; whatever was in flight is lost."""
        if self.closed:
            return
        self.closed = True
        self.rates.close()
        for hook in self.closing_hooks:
            hook()
        for producer in list(self.producers):
            if notify:
                producer.connection.out.close_producer(producer.producer_id)
        self.producers.clear()
        self._producer_names.clear()
        for sub in list(self.subscriptions.values()):
            await sub.close(notify)
        self.subscriptions.clear()

    async def delete(self, force: bool = False) -> None:
        if not force and (self.producers or any(s.consumers for s in self.subscriptions.values())):
            raise NotAllowedError(f"topic {self.name} has connected producers or consumers")
        await self.close(notify=force)
