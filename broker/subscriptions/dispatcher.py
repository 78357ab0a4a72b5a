"""Dispatchers move entries from a subscription's cursor to its consumers.

How it works: one read loop per subscription. It waits until some consumer
can take messages (permits, unacked limit), reads up to
``max_read_batch_size`` entries -- positions waiting for redelivery first,
then new entries from the cursor, waiting at the tail for the next publish --
and hands them out according to the subscription type. Every decision about
*who* gets an entry is a pure function in this package (failover.py,
shared.py, key_shared.py); this module only does the I/O around them.

Anything that changes what should be read (a consumer leaves, a rewind, a
redelivery request) calls ``wake()`` or ``restart()``; ``restart`` cancels an
in-flight read, which the cursor tolerates, so the loop never acts on a
stale read.

The single-active-consumer dispatcher (Exclusive and Failover) lives here;
Shared and Key_Shared are in dispatcher_shared.py.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time

from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.failover import choose_active_consumer
from broker.subscriptions.redelivery import RedeliveryTracker
from magnetar.protocol.frames import parse_headers_and_payload
from storage.errors import StorageError

log = logging.getLogger(__name__)


def to_dispatched(entry, redelivery_count: int = 0, key_hash_of=None) -> DispatchedEntry | None:
    """A read entry with its message count (and key hash when asked); None when its bytes are unreadable."""
    try:
        metadata, _, _ = parse_headers_and_payload(entry.data)
    except Exception:
        log.error("entry %s is unreadable; it is skipped", entry.position)
        return None
    n = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    d = DispatchedEntry(tuple(entry.position), entry.data, max(n, 1), redelivery_count=redelivery_count)
    d.metadata = metadata
    if key_hash_of is not None:
        d.key_hash = key_hash_of(metadata)
    return d


class Dispatcher(abc.ABC):
    """The read loop shared by all dispatchers. Subclasses decide readiness and hand-out."""

    def __init__(self, subscription, max_read_batch_size: int = 100):
        self.subscription = subscription
        self.cursor = subscription.cursor
        self.max_read_batch_size = max_read_batch_size
        self.consumers: list[Consumer] = []
        self.redelivery = RedeliveryTracker()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch {self.subscription.name}")

    async def restart(self) -> None:
        """Cancel any in-flight read and begin again (after a rewind, seek or consumer change)."""
        await self._stop_loop()
        self.start()
        self.wake()

    async def close(self) -> None:
        self._closed = True
        await self._stop_loop()

    async def _stop_loop(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def wake(self) -> None:
        self._wakeup.set()

    async def stop_for_reset(self) -> None:
        """Stop the loop and forget what was queued for the old position (a seek); ``start()`` resumes."""
        await self._stop_loop()
        self.forget_queued()

    def forget_queued(self) -> None:
        self.redelivery.clear()

    # ---- consumers -------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.start()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> list:
        """Drop a consumer; returns the positions it held unacknowledged."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        return consumer.pending.release_all()

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)
        self.wake()

    # ---- the loop --------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            self._wakeup.clear()
            if not self.ready():
                await self._wakeup.wait()
                continue
            try:
                entries = await self.read(self.read_count())
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                log.warning("read for subscription %s failed: %s", self.subscription.name, exc)
                await self._backoff()
                continue
            except Exception:  # a bug here must not end delivery for good: a dead loop is a silent stall
                log.exception("dispatch loop of subscription %s failed; it goes on", self.subscription.name)
                await self._backoff()
                continue
            if entries is None:  # woken while waiting at the tail: decide again
                continue
            try:
                sent = self.dispatch(entries)
            except Exception:
                log.exception("dispatching to subscription %s failed; it goes on", self.subscription.name)
                self.cursor.rewind()  # what was read may not have gone out: read it again
                await self._backoff()
                continue
            if not sent:
                await self._wakeup.wait()  # nothing could be handed out: wait for permits or consumers

    async def _backoff(self) -> None:
        try:
            await asyncio.wait_for(self._wakeup.wait(), 0.1)
        except asyncio.TimeoutError:
            pass

    async def read_tail(self, count: int) -> list | None:
        """Read from the cursor; at the tail, wait for a publish or a wake-up (then None).

        Only waiting happens beside the wake-up; the read itself runs in the loop's own task, so a restart
        cancels it before it can move the cursor. (A read in a task of its own, woken by a publish just as a
        consumer left, could start after the rewind, move the cursor a whole batch on, and have its entries
        dropped by the cancelled loop: a consumer of the shedding test lost exactly one batch that way.)
        """
        if not self.cursor.has_more_entries():
            arrived = asyncio.ensure_future(self.cursor.wait_for_entries())
            woken = asyncio.ensure_future(self._wakeup.wait())
            try:
                await asyncio.wait({arrived, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
                woken.cancel()
            if arrived.done() and not arrived.cancelled() and arrived.exception() is not None:
                raise arrived.exception()  # the managed ledger closed or was fenced
            if not self.cursor.has_more_entries():
                return None
        return await self.cursor.read_entries(count)

    def entries_to_send(self, entries, key_hash_of=None) -> list[DispatchedEntry]:
        out = []
        for entry in entries:
            if self.cursor.is_deleted(entry.position):
                continue
            d = to_dispatched(entry, self.redelivery.count_for(tuple(entry.position)), key_hash_of)
            if d is not None:
                d.ack_set = self.subscription.ack_set_for(d)
                out.append(d)
        return out

    # ---- subclass hooks --------------------------------------------------

    @abc.abstractmethod
    def ready(self) -> bool:
        """Can some consumer take messages now?"""

    @abc.abstractmethod
    def read_count(self) -> int:
        """How many entries to read next."""

    @abc.abstractmethod
    async def read(self, count: int) -> list | None:
        """Read up to ``count`` entries; None when woken before any arrived."""

    @abc.abstractmethod
    def dispatch(self, entries) -> bool:
        """Hand entries out; False when none could be sent."""

    @abc.abstractmethod
    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        """Send ``positions`` (None: everything the consumer holds) again, counting the redelivery."""

    def on_ack(self) -> None:
        for c in self.consumers:
            c.acked()
        self.wake()


class SingleActiveConsumerDispatcher(Dispatcher):
    """Exclusive and Failover: every entry goes to the one active consumer.

    Failover picks the active consumer by priority level, then name (and for a
    partition, rotates by partition index); every consumer hears
    ACTIVE_CONSUMER_CHANGE when that changes. A change of active consumer, or a
    redelivery request, rewinds the cursor to just after the mark-delete
    position so the new active consumer sees everything unacknowledged, in order.
    """

    def __init__(self, subscription, max_read_batch_size: int = 100, partition_index: int = -1, *, failover: bool = False):
        super().__init__(subscription, max_read_batch_size)
        self.partition_index = partition_index
        self.failover = failover  # only Failover consumers hear ACTIVE_CONSUMER_CHANGE, as in Pulsar
        self.active: Consumer | None = None

    def ready(self) -> bool:
        return self.active is not None and self.active.can_take()

    def read_count(self) -> int:
        return max(1, min(self.active.permits, self.max_read_batch_size))

    async def read(self, count: int):
        return await self.read_tail(count)

    def dispatch(self, entries) -> bool:
        if self.active is None:
            return False
        out = self.entries_to_send(entries)
        self.active.deliver(out)
        self.subscription.record_out(out)
        return True

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._pick_active(initial=True)
        self.start()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> list:
        released = super().remove_consumer(consumer)
        for p in released:
            self.redelivery.increment(p)
        if consumer is self.active:
            self.active = None
            self._pick_active()
            asyncio.get_running_loop().create_task(self._rewind())
        return released

    def _pick_active(self, initial: bool = False) -> None:
        chosen = choose_active_consumer(self.consumers, self.partition_index)
        changed = chosen is not self.active
        previous, self.active = self.active, chosen
        if changed and previous is not None and previous in self.consumers:
            # The old active consumer's unacked messages go to the new one after a rewind.
            for p in previous.pending.release_all():
                self.redelivery.increment(p)
            asyncio.get_running_loop().create_task(self._rewind())
        if self.failover and (changed or initial):
            for c in self.consumers:
                c.connection.send_active_consumer_change(c.consumer_id, c is self.active)

    async def _rewind(self) -> None:
        self.cursor.rewind()
        await self.restart()

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        if consumer is not self.active:
            return
        for p in consumer.pending.release_all():
            self.redelivery.increment(p)
        consumer.redeliveries += 1
        await self._rewind()


def now_ms() -> int:
    return int(time.time() * 1000)
