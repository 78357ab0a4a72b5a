"""A persistent topic: a managed ledger, the producers writing it and the subscriptions reading it.

Publishing appends the entry exactly as the producer sent it (headers and
payload: magic, checksum, metadata, payload; a batch is one entry) and
answers the producer once the managed ledger confirms the add, in the order
the sends arrived. Subscriptions are durable cursors (or non-durable ones for
readers) on the same managed ledger.

When the managed ledger is fenced (another broker took the topic over) the
topic stops: every producer and consumer is closed so the clients look the
topic up again, and the broker drops the topic.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.errors import (
    BrokerError, ConsumerBusyError, NotAllowedError, PersistenceError, ProducerBusyError, ServiceNotReadyError,
    SubscriptionNotFoundError, TopicFencedError, TopicTerminatedError, from_storage,
)
from broker.compaction.compactor import TopicCompaction
from broker.compaction.model import CURSOR_NAME as COMPACTION_CURSOR
from broker.compaction.view import plain_view, read_compacted as read_compacted_view
from broker.subscriptions import SubscriptionType, detach_last_consumer
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.subscription import Subscription
from broker.topics import lifecycle
from broker.topics.dedup import CURSOR_NAME as DEDUP_CURSOR, Deduplication, DupStatus
from broker.topics.producer import Producer, Verdict, admit
from broker.topics.throttling import TopicRates
from magnetar.protocol.frames import parse_headers_and_payload
from magnetar.topic_name import TopicName
from storage.errors import StorageError
from storage.managed_ledger import InitialPosition, ManagedLedgerFencedError, Position

log = logging.getLogger(__name__)

DUPLICATE = Position(-1, -1)

# Policies whose broker default has another name in the config (None: no broker-wide default).
_CONFIG_DEFAULTS = {
    "message_ttl_in_seconds": "ttl_duration_default_in_seconds",
    "backlog_quota_map": None, "persistence": None, "inactive_topic_policies": None,
    "retention_time_minutes": None, "retention_size_mb": None,
}


class PersistentTopic:
    persistent = True

    def __init__(self, service, name: TopicName, ml, policies, topic_policies=None):
        self.service = service
        self.name = name
        self.ml = ml
        self.policies = policies  # the namespace's
        self.topic_policies = topic_policies  # the topic's own (override the namespace's); None = none
        self._applying: asyncio.Lock = asyncio.Lock()
        self.last_active = time.monotonic()  # the last publish, or producer or consumer coming or going
        self.quota_enforcements = 0  # backlog quota enforcements (stats)
        self.config = service.config
        # Insertion-ordered sets, so a connection creating thousands of producers costs O(1) per create and close.
        self.producers: dict[Producer, None] = {}
        self._producer_names: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.dedup = Deduplication()
        self.topic_epoch = 0
        self._waiting_exclusive: list[tuple[Producer, asyncio.Future]] = []
        self._tasks: set[asyncio.Task] = set()
        self.closed = False
        listeners = getattr(ml, "fence_listeners", None)
        if listeners is not None:
            listeners.append(self.fenced)
        self._publishing = 0  # writes in flight
        self._idle = asyncio.Event()
        self._idle.set()
        self.msg_in = self.bytes_in = self.msg_out = self.bytes_out = 0
        self.last_batch_size = None  # messages in the last entry, known once read or written here
        self.created_ms = int(time.time() * 1000)
        self.compaction = TopicCompaction(self)
        self.rates = TopicRates(self)  # publish and dispatch rates (broker/topics/throttling.py)
        self.closing_hooks: list = []  # called once when the topic closes (e.g. to stop watching its policies)

    @classmethod
    async def load(cls, service, name: TopicName, ml, policies, topic_policies=None) -> "PersistentTopic":
        topic = cls(service, name, ml, policies, topic_policies)
        for cursor_name, cursor in list(ml.cursors.items()):
            if cursor_name not in (DEDUP_CURSOR, COMPACTION_CURSOR):
                topic.subscriptions[cursor_name] = Subscription(topic, cursor_name, cursor, durable=True)
        if topic.limit("deduplication_enabled"):
            await topic.dedup.enable(ml)
        await topic.compaction.restore()
        return topic

    def limit(self, name: str):
        """The topic's own policy if set, else the namespace's, else the broker default."""
        value = getattr(self.topic_policies, name, None)
        if value is None:
            value = getattr(self.policies, name, None)
        if value is not None:
            return value
        default = _CONFIG_DEFAULTS.get(name, name)
        return None if default is None else getattr(self.config, default, None)

    def apply_policies(self, policies) -> None:
        """The namespace's policies changed: limits read from them apply from now on, rates at once, the rest
        (dedup, retention and persistence, unacked limits, TTL and quota) in a task of its own."""
        self.policies = policies
        self.rates.apply(policies, self.topic_policies)
        self.spawn(self._apply_live())

    def apply_topic_policies(self, topic_policies) -> None:
        self.topic_policies = topic_policies
        self.rates.apply(self.policies, topic_policies)
        self.spawn(self._apply_live())

    async def _apply_live(self) -> None:
        async with self._applying:  # one at a time: two quick changes must not toggle dedup concurrently
            if self.closed:
                return
            try:
                want_dedup = bool(self.limit("deduplication_enabled"))
                if want_dedup and not self.dedup.enabled:
                    await self.dedup.enable(self.ml)
                elif not want_dedup and self.dedup.enabled:
                    await self.dedup.disable(self.ml)
                self.ml.config = self.service.managed_ledger_config_for(self.policies, self.topic_policies)
                for sub in list(self.subscriptions.values()):
                    sub.limits_changed()
                await lifecycle.enforce_backlog_quota(self)
                await lifecycle.expire_by_ttl(self)
            except (BrokerError, StorageError) as exc:
                log.warning("applying the policies of %s: %s", self.name, exc)

    @property
    def storage_size(self) -> int:
        return self.ml.total_size

    # ---- termination ------------------------------------------------------

    @property
    def terminated(self) -> bool:
        return self.ml.info.terminated

    async def terminate(self) -> Position:
        """No more messages: producers are closed (and refused from now on), consumers are told
        REACHED_END_OF_TOPIC once they have read everything. Returns the last message's position."""
        self._check_open()
        if not self.terminated:
            self.ml.info.terminated = True
            await self._guard(self.ml.write_info())
        for producer in list(self.producers):
            self.remove_producer(producer)
            producer.connection.out.close_producer(producer.producer_id)
        for sub in self.subscriptions.values():
            if sub.dispatcher is not None:
                sub.dispatcher.wake()
        return self.ml.last_confirmed_entry

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- producers -------------------------------------------------------

    async def add_producer(self, producer: Producer, requested_epoch: int | None) -> asyncio.Future | None:
        """Admit a producer; for WaitForExclusive returns a future that resolves when it is admitted."""
        self._check_open()
        if self.terminated:
            raise TopicTerminatedError(f"topic {self.name} is terminated")
        await lifecycle.admit_producer(self)
        self._check_open()
        self.last_active = time.monotonic()
        limit = self.limit("max_producers_per_topic")
        if limit and len(self.producers) >= limit:
            raise ProducerBusyError(f"topic {self.name} reached its limit of {limit} producers")
        if producer.user_provided_name and producer.name in self._producer_names:
            raise ProducerBusyError(f"producer with name {producer.name!r} is already connected to topic {self.name}")
        decision = admit(producer.access_mode, self.producers, self.topic_epoch, requested_epoch)
        if decision.verdict is Verdict.WAIT:
            fut = asyncio.get_running_loop().create_future()
            self._waiting_exclusive.append((producer, fut))
            producer.ready = False
            return fut
        if decision.verdict is Verdict.FENCE_OTHERS:
            for other in list(self.producers):
                self.remove_producer(other)
                other.connection.out.close_producer(other.producer_id)
        self._attach(producer, decision.new_epoch)
        return None

    def _attach(self, producer: Producer, new_epoch: int | None) -> None:
        if new_epoch is not None:
            self.topic_epoch = new_epoch
            producer.epoch = new_epoch
        producer.ready = True
        self.producers[producer] = None
        self._producer_names[producer.name] = producer

    def remove_producer(self, producer: Producer) -> None:
        self.producers.pop(producer, None)
        if self._producer_names.get(producer.name) is producer:
            del self._producer_names[producer.name]
        self._waiting_exclusive = [(p, f) for p, f in self._waiting_exclusive if p is not producer]
        if not self.producers and self._waiting_exclusive:
            waiter, fut = self._waiting_exclusive.pop(0)
            self._attach(waiter, self.topic_epoch + 1)
            if not fut.done():
                fut.set_result(None)

    # ---- publish ---------------------------------------------------------

    async def publish(self, producer: Producer, sequence_id: int, highest_sequence_id: int,
                      num_messages: int, data: bytes) -> Position:
        """Persist one entry; returns its position (DUPLICATE for a deduplicated resend)."""
        self._check_open()
        if self.terminated:
            raise TopicTerminatedError(f"topic {self.name} is terminated")
        self.last_active = time.monotonic()
        ownership = self.service.ownership
        if ownership is not None and not ownership.writable:
            raise ServiceNotReadyError(f"broker is re-verifying its ownership of {self.name}; retry")
        status = self.dedup.check(producer.name, sequence_id, highest_sequence_id)
        if status is DupStatus.DUPLICATE:
            return DUPLICATE
        if status is DupStatus.UNKNOWN:
            raise PersistenceError(f"sequence id {sequence_id} of {producer.name!r} is still being stored; retry")
        self._publishing += 1
        self._idle.clear()
        # The store runs to its end even when the publishing connection goes away and its task is cancelled:
        # deduplication must learn whether the entry was stored (persisted) or not (forgotten), or every resend of
        # this sequence id is answered "still being stored" for ever (seen in the nemesis's long runs).
        return await asyncio.shield(self._store(producer, sequence_id, highest_sequence_id, num_messages, data))

    async def _store(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
                     data: bytes) -> Position:
        try:
            position = await self.ml.add_entry(data)
        except StorageError as exc:
            self.dedup.forget_pushed(producer.name)
            raise self._translated(exc, "storing the message failed") from exc
        except BaseException:
            self.dedup.forget_pushed(producer.name)
            raise
        finally:
            self._publishing -= 1
            if not self._publishing:
                self._idle.set()
        producer.record(num_messages, len(data))
        self.msg_in += num_messages
        self.bytes_in += len(data)
        self.last_batch_size = num_messages
        await self.dedup.persisted_at(producer.name, max(sequence_id, highest_sequence_id), position)
        self.compaction.after_publish()
        return position

    def fenced(self, exc: Exception) -> None:
        """The managed ledger is fenced or closed under the topic: close the topic, so its producers and
        consumers are told to look it up again (on this broker, if it still owns the bundle, the topic is
        loaded afresh), instead of dispatch loops retrying a read that can never succeed."""
        if not self.closed:
            log.warning("topic %s fenced: %s; closing it", self.name, exc)
            if self.service.topics.get(str(self.name)) is self:
                self.spawn(self.service.unload_topic(self.name))
            else:  # already replaced (or never registered): close only this instance
                self.spawn(self.close(notify=True))

    # ---- subscriptions ---------------------------------------------------

    async def subscribe(self, consumer: Consumer, sub_name: str, sub_type: SubscriptionType, *, durable: bool,
                        initial_position: InitialPosition, start: Position | None = None,
                        start_inclusive: bool = False, read_compacted: bool = False) -> Subscription:
        self._check_open()
        self.last_active = time.monotonic()
        if sub_name in (DEDUP_CURSOR, COMPACTION_CURSOR):
            raise NotAllowedError(f"subscription name {sub_name!r} is reserved")
        if read_compacted and sub_type not in (SubscriptionType.Exclusive, SubscriptionType.Failover):
            raise NotAllowedError("read_compacted is only allowed on Exclusive and Failover subscriptions")
        limit = self.limit("max_consumers_per_topic")
        if limit and sum(len(s.consumers) for s in self.subscriptions.values()) >= limit:
            raise ConsumerBusyError(f"topic {self.name} reached its limit of {limit} consumers")
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            if durable:
                if not self.config.allow_auto_subscription_creation:
                    raise SubscriptionNotFoundError(f"subscription {sub_name} does not exist on {self.name}")
                cursor = await self._guard(self.ml.open_cursor(sub_name, initial_position=initial_position))
                if start is not None:
                    await self._guard(cursor.reset(start))
                # The topic may have closed (unloaded) while the cursor opened: a consumer added now would hang on
                # a closed topic, never told to reconnect.
                self._check_open()
            else:
                if start is None and initial_position is InitialPosition.LATEST:
                    start, start_inclusive = self.ml.last_confirmed_entry, False
                cursor = self.ml.new_non_durable_cursor(start=start, inclusive=start_inclusive)
            sub = self.subscriptions.get(sub_name) or Subscription(self, sub_name, cursor, durable=durable)
            self.subscriptions[sub_name] = sub
        elif not durable and sub.durable:
            raise ConsumerBusyError(f"subscription {sub_name} is durable; a reader cannot use its name")
        await sub.settled()
        self._check_open()
        if read_compacted:
            read_compacted_view(sub, self.compaction)
        elif not sub.consumers:
            plain_view(sub)  # the first consumer decides, as a subscription's type is decided
        sub.add_consumer(consumer, sub_type)
        return sub

    async def create_subscription(self, sub_name: str, start: Position | None, initial_position: InitialPosition) -> None:
        """Admin: create a durable subscription without a consumer."""
        self._check_open()
        if sub_name in self.subscriptions:
            raise ConsumerBusyError(f"subscription {sub_name} already exists on {self.name}")
        if sub_name in (DEDUP_CURSOR, COMPACTION_CURSOR):
            raise NotAllowedError(f"subscription name {sub_name!r} is reserved")
        cursor = await self._guard(self.ml.open_cursor(sub_name, initial_position=initial_position))
        if start is not None:
            await self._guard(cursor.reset(start))
        self.subscriptions[sub_name] = Subscription(self, sub_name, cursor, durable=True)

    async def unsubscribe(self, sub_name: str, consumer: Consumer | None = None) -> None:
        sub = await detach_last_consumer(self.name, self.subscriptions, sub_name, consumer)
        await self.remove_subscription(sub_name, delete=sub.durable)

    async def remove_subscription(self, sub_name: str, delete: bool = False) -> None:
        sub = self.subscriptions.pop(sub_name, None)
        if sub is None:
            return
        self.rates.forget_subscription(sub_name)
        await sub.close(notify=True)
        if delete:
            await self._guard(self.ml.delete_cursor(sub_name))

    async def _guard(self, awaitable):
        """Run a managed-ledger operation, translating storage errors at the broker boundary."""
        try:
            return await awaitable
        except StorageError as exc:
            raise self._translated(exc, str(self.name)) from exc

    def _translated(self, exc: StorageError, doing: str) -> BrokerError:
        """A fenced managed ledger means another broker took the topic over (the topic fences itself); any other
        storage error goes through the broker's one translation."""
        if isinstance(exc, ManagedLedgerFencedError):
            self.fenced(exc)
            return TopicFencedError(f"topic {self.name} moved to another broker")
        return from_storage(exc, doing)

    # ---- queries ---------------------------------------------------------

    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        """The last stored message: (position, batch index) -- batch index -1 for a single message. For a
        ``compacted`` reader, the last message of the compacted view when nothing was stored after it."""
        if compacted:
            found = await self.compaction.last_message_id()
            if found is not None:
                return found
        last = self.ml.last_confirmed_entry
        if last.entry_id < 0:
            return last, -1
        if self.last_batch_size is None:
            entries = await self._guard(self.ml.read_entries_at([last]))
            n = 1
            if entries:
                md, _, _ = parse_headers_and_payload(entries[0].data)
                n = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
            self.last_batch_size = n
        return last, (self.last_batch_size - 1 if self.last_batch_size > 1 else -1)

    def earliest_position(self) -> Position:
        """The first stored entry (or where the next one will be, for an empty topic)."""
        return self.ml.first_position

    def latest_position(self) -> Position:
        """Just after the last stored entry: a cursor reset here sees only new messages."""
        return self.ml.next_position

    async def position_for_publish_time(self, publish_time_ms: int) -> Position:
        """The first entry published at or after ``publish_time_ms`` (Pulsar's seek by time)."""

        def before(entry) -> bool:
            md, _, _ = parse_headers_and_payload(entry.data)
            return md.publish_time < publish_time_ms

        cursor = self.ml.new_non_durable_cursor(start=None, inclusive=True)
        try:
            newest_before = await self._guard(cursor.find_newest_matching(before))
        finally:
            await cursor.close()
        if newest_before is None:
            return self.earliest_position()
        return self.ml.position_after(newest_before)

    def record_out(self, entries) -> None:
        for e in entries:
            self.msg_out += e.num_messages
            self.bytes_out += len(e.data)

    def stats(self) -> dict:
        return {
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "storageSize": self.ml.total_size,
            "msgBacklog": sum(s.backlog for s in self.subscriptions.values()),
            "publishers": [
                {"producerName": p.name, "producerId": p.producer_id, "msgInCounter": p.msg_in,
                 "accessMode": p.access_mode.name, "address": getattr(p.connection, "remote_address", "")}
                for p in self.producers
            ],
            "subscriptions": {name: s.stats() for name, s in self.subscriptions.items()},
            "deduplicationStatus": "Enabled" if self.dedup.enabled else "Disabled",
            "backlogSize": lifecycle.backlog_bytes(self, max((s.backlog for s in self.subscriptions.values()), default=0)),
            "backlogQuotaEnforcements": self.quota_enforcements,
            "topicEpoch": self.topic_epoch,
            "compaction": self.compaction.stats(),
            **self.rates.stats(),
        }

    def internal_stats(self) -> dict:
        last = self.ml.last_confirmed_entry
        return {
            "state": "Terminated" if self.terminated else "LedgerOpened",
            "entriesAddedCounter": self.ml.stats.get("entries_added", 0) if isinstance(self.ml.stats, dict) else getattr(self.ml.stats, "entries_added", 0),
            "numberOfEntries": self.ml.number_of_entries,
            "totalSize": self.ml.total_size,
            "lastConfirmedEntry": f"{last.ledger_id}:{last.entry_id}",
            "ledgers": [
                {"ledgerId": l["ledger_id"], "entries": l["entries"], "size": l["size"], "timestamp": l.get("timestamp", 0)}
                for l in self.ml.ledgers_info()
            ],
            "cursors": {
                name: {
                    "markDeletePosition": "%d:%d" % tuple(c.mark_delete_position),
                    "readPosition": "%d:%d" % tuple(c.read_position),
                    "individuallyDeletedMessages": str(c.individually_deleted_ranges),
                    "totalNonContiguousDeletedMessagesRange": c.individually_deleted_range_count,
                    "messagesConsumedCounter": 0,
                    "numberOfEntriesSinceFirstNotAckedMessage": c.backlog,
                    "properties": dict(c.properties),
                    # Magnetar's: the mark-delete rate's effect (acks answered before written, states written)
                    "persistentMarkDeletePosition": "%d:%d" % tuple(c.persisted_mark_delete_position),
                    "markDeleteWrites": c.mark_delete_writes,
                    "deferredAcks": c.deferred_acks,
                }
                for name, c in self.ml.cursors.items()
            },
        }

    # ---- lifecycle -------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise TopicFencedError(f"topic {self.name} is being unloaded; look it up again")

    async def close(self, notify: bool = True) -> None:
        """Disconnect producers and consumers (they reconnect through lookup) and close the managed ledger."""
        if self.closed:
            return
        self.closed = True
        self.rates.close()
        for hook in self.closing_hooks:
            hook()
        if self._publishing:
            # Let in-flight writes finish and their receipts go out before the producers are told to move,
            # so a graceful hand-off causes no resend (and no duplicate).
            try:
                await asyncio.wait_for(self._idle.wait(), 10)
            except asyncio.TimeoutError:
                log.warning("topic %s closes with %d writes still in flight", self.name, self._publishing)
        for producer in list(self.producers):
            if notify:
                producer.connection.out.close_producer(producer.producer_id)
        self.producers.clear()
        self._producer_names.clear()
        for _, fut in self._waiting_exclusive:
            if not fut.done():
                fut.set_exception(TopicFencedError(f"topic {self.name} closed"))
        for sub in list(self.subscriptions.values()):
            await sub.close(notify)
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        try:
            await self.compaction.close()
            await self.ml.close()
        except (StorageError, BrokerError) as exc:
            log.warning("closing managed ledger of %s: %s", self.name, exc)

    async def delete(self, force: bool = False) -> None:
        if not force and (self.producers or any(s.consumers for s in self.subscriptions.values())):
            raise NotAllowedError(f"topic {self.name} has connected producers or consumers")
        await self.close(notify=force)
        await self.compaction.delete_ledgers()
        await self._guard(self.ml.delete())
