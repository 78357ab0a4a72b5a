"""Dispatchers move entries from a subscription's cursor to its consumers.

How it works: one read loop per subscription. It waits until some consumer
can take messages (permits, unacked limit), reads up to
``max_read_batch_size`` entries -- positions waiting for redelivery first,
then new entries from the cursor, waiting at the tail for the next publish --
and hands them out according to the subscription type. Every decision about
*who* gets an entry is a pure function in this package; this module only
does the I/O around those decisions.

Anything that changes what should be read (a consumer leaves, a rewind, a
redelivery request) calls ``wake()`` or ``restart()``; ``restart`` cancels an
in-flight read, which the cursor tolerates, so the loop never acts on a
stale read.

Each subscription type keeps its pure rules and its dispatcher (a subclass
of ``Dispatcher``) in one module: single_active.py (Exclusive and Failover),
shared.py and key_shared.py.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time

from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.redelivery import RedeliveryTracker
from magnetar.protocol.frames import parse_headers_and_payload
from storage.errors import StorageError

log = logging.getLogger(__name__)
DEFAULT_MAX_READ_BYTES = 5 * 1024 * 1024


def to_dispatched(entry, redelivery_count: int = 0, key_hash_of=None) -> DispatchedEntry | None:
    """A read entry with its message count (and key hash when asked); None when its bytes are unreadable."""
    try:
        metadata, payload, _ = parse_headers_and_payload(entry.data)
    except Exception:
        log.error("entry %s is unreadable; it is skipped", entry.position)
        return None
    n = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    # Stored before SEND checked the count: no batch holds more messages than it has bytes.
    n = min(max(n, 1), max(len(payload), 1))
    d = DispatchedEntry(tuple(entry.position), entry.data, n, redelivery_count=redelivery_count)
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
        self.max_read_bytes = DEFAULT_MAX_READ_BYTES  # Pulsar's dispatcherMaxReadSizeBytes; set from the config
        self._avg_entry_bytes = 0.0  # recent entries' size, to turn the byte bound into an entry count
        # The dispatch rates (broker.topics.throttling.SubscriptionRates: wait() and entries()); None = no limit.
        self.rate_limits = None
        # The broker-wide bound on bytes read and not yet handed out (reads_in_flight.ReadsInFlight); None = none.
        self.reads_in_flight = None
        self._reserved = 0  # bytes of it this dispatcher's current read holds
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
            if self.rate_limits is not None:
                wait_s = self.rate_limits.wait()
                if wait_s is not None:  # the dispatch rate is used up for this period
                    await self._pause(wait_s)
                    continue
            try:
                sent = await self._read_and_dispatch(self.rate_bounded(self.read_count()))
            finally:
                self._release_read()
            if sent is None:
                continue
            if not sent:
                await self._wakeup.wait()  # nothing could be handed out: wait for permits or consumers

    async def _read_and_dispatch(self, count: int) -> bool | None:
        """One read and its hand-out: whether anything was sent, or None to decide again."""
        try:
            entries = await self.read(count)
        except asyncio.CancelledError:
            raise
        except StorageError as exc:
            if self._storage_gone():
                # No read will succeed again: close the topic (clients look it up again) and end this loop.
                log.warning("subscription %s: its managed ledger is %s (%s); closing the topic", self.subscription.name,
                            self.cursor.ml.state.value, exc)
                self._closed = True
                self.subscription.topic.fenced(exc)
                return None
            log.warning("read for subscription %s failed: %s", self.subscription.name, exc)
            await self._backoff()
            return None
        except Exception:  # a bug here must not end delivery for good: a dead loop is a silent stall
            log.exception("dispatch loop of subscription %s failed; it goes on", self.subscription.name)
            await self._backoff()
            return None
        if entries is None:  # woken while waiting at the tail: decide again
            return None
        try:
            return self.dispatch(entries)
        except Exception:
            log.exception("dispatching to subscription %s failed; it goes on", self.subscription.name)
            self.cursor.rewind()  # what was read may not have gone out: read it again
            await self._backoff()
            return None

    def _storage_gone(self) -> bool:
        ml = getattr(self.cursor, "ml", None)
        state = getattr(ml, "state", None)
        return state is not None and state.value in ("fenced", "closed", "deleted")

    async def _backoff(self) -> None:
        await self._pause(0.1)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if woken (the loop then decides again)."""
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def rate_bounded(self, count: int) -> int:
        """``count`` entries, or fewer when the dispatch rates allow fewer messages or bytes this period."""
        if self.rate_limits is None:
            return count
        return self.rate_limits.entries(count, self._avg_entry_bytes)

    async def read_tail(self, count: int) -> list | None:
        """Read from the cursor; at the tail, wait for a publish or a wake-up (then None).

        Only waiting happens beside the wake-up; the read itself runs in the loop's own task, so a restart
        cancels it before it can move the cursor. (A read in a task of its own, woken by a publish just as a
        consumer left, could start after the rewind, move the cursor a whole batch on, and have its entries
        dropped by the cancelled loop: a consumer of the shedding test lost exactly one batch that way.)
        """
        if not self.cursor.has_more_entries():
            if self.subscription.topic.terminated:  # all of a terminated topic was read: nothing more will come
                for consumer in self.consumers:
                    consumer.reached_end_of_topic()
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
        count = self.bounded_by_bytes(count)
        await self.reserve_read(count)
        entries = await self.cursor.read_entries(count)
        self._note_sizes(entries)
        return entries

    async def reserve_read(self, count: int) -> None:
        """Take a read of ``count`` entries out of the broker-wide bound; the loop gives it back once the entries
        are handed out. Called just before storage is asked, never while waiting at the tail."""
        if self.reads_in_flight is not None and not self._reserved:
            self._reserved = await self.reads_in_flight.acquire(self.read_bytes(count))

    def _release_read(self) -> None:
        if self._reserved:
            self.reads_in_flight.release(self._reserved)
            self._reserved = 0

    def bounded_by_bytes(self, count: int) -> int:
        """``count`` entries, or fewer when entries of the recent average size would exceed ``max_read_bytes``:
        the bound on what one read brings into memory (and then into the consumers' socket buffers)."""
        if self._avg_entry_bytes <= 0:
            return count
        return max(1, min(count, int(self.max_read_bytes // self._avg_entry_bytes)))

    def read_bytes(self, count: int) -> int:
        """What a read of ``count`` entries is expected to bring in (recent average size; 1 KiB before any)."""
        return int(min(self.max_read_bytes, count * (self._avg_entry_bytes or 1024)))

    def _note_sizes(self, entries) -> None:
        for entry in entries:
            size = len(entry.data)
            self._avg_entry_bytes = size if self._avg_entry_bytes <= 0 else 0.8 * self._avg_entry_bytes + 0.2 * size

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


def now_ms() -> int:
    return int(time.time() * 1000)
