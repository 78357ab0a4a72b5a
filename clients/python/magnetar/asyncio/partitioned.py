"""Partitioned topics: one producer or consumer per partition behind a single object.

Routing follows the official clients: a message with a partition key goes to
``hash(key) mod n`` (Java's ``String.hashCode``, Pulsar's default
``JavaStringHash``); one without a key goes round robin. The consumer fans the
partitions' messages into one queue (bounded, so each partition's flow control
still holds) and routes acks back to the partition that delivered them.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import random

from magnetar.errors import Timeout


def java_string_hash(key: str) -> int:
    h = 0
    for ch in key.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: str, partitions: int) -> int:
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


class PartitionsRoutingMode(enum.IntEnum):
    """The official client's names; keyed messages always go by key hash."""

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class PartitionedProducer:
    def __init__(self, topic: str, producers: list, routing: int = PartitionsRoutingMode.RoundRobinDistribution):
        self._topic = topic
        self.producers = producers
        self._round_robin = itertools.cycle(range(len(producers)))
        self._single = random.randrange(len(producers)) if routing == PartitionsRoutingMode.UseSinglePartition else None

    def _route(self, partition_key) -> object:
        if partition_key is not None:
            return self.producers[partition_for_key(partition_key, len(self.producers))]
        if self._single is not None:
            return self.producers[self._single]
        return self.producers[next(self._round_robin)]

    async def send(self, content: bytes, **kwargs):
        return await self._route(kwargs.get("partition_key")).send(content, **kwargs)

    def send_async(self, content: bytes, **kwargs) -> asyncio.Future:
        return self._route(kwargs.get("partition_key")).send_async(content, **kwargs)

    def enqueue(self, content: bytes, completion, **kwargs) -> None:
        self._route(kwargs.get("partition_key")).enqueue(content, completion, **kwargs)

    def pending_messages(self) -> int:
        return sum(p.pending_messages() for p in self.producers)

    @property
    def schema(self):
        return self.producers[0].schema

    @property
    def on_room(self):
        return self.producers[0].on_room

    @on_room.setter
    def on_room(self, hook) -> None:
        for p in self.producers:
            p.on_room = hook

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self.producers[0].producer_name()

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self.producers)

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.producers))


class MultiTopicsConsumer:
    """Several consumers (the partitions of a topic, or topics) read as one."""

    def __init__(self, topic: str, consumers: list, queue_size: int):
        self._topic = topic
        self.consumers = consumers
        self._by_topic = {c.topic(): c for c in consumers}
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=max(1, queue_size))
        self._pumps = [asyncio.get_running_loop().create_task(self._pump(c)) for c in consumers]

    async def _pump(self, consumer) -> None:
        while not consumer.closed:
            msg = await consumer.receive()
            await self._queue.put(msg)

    async def receive(self, timeout_millis: int | None = None):
        try:
            if timeout_millis is None:
                return await self._queue.get()
            return await asyncio.wait_for(self._queue.get(), timeout_millis / 1000)
        except asyncio.TimeoutError as exc:
            raise Timeout(f"no message within {timeout_millis} ms") from exc

    async def batch_receive(self, max_messages: int = 100, timeout_millis: int = 100):
        out = [await self.receive(timeout_millis)]
        while len(out) < max_messages and not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    def _owner(self, msg):
        return self._by_topic[msg.topic_name()]

    async def acknowledge(self, msg) -> None:
        await self._owner(msg).acknowledge(msg)

    async def acknowledge_cumulative(self, msg) -> None:
        await self._owner(msg).acknowledge_cumulative(msg)

    def negative_acknowledge(self, msg) -> None:
        self._owner(msg).negative_acknowledge(msg)

    async def reconsume_later(self, msg, delay, properties=None) -> None:
        await self._owner(msg).reconsume_later(msg, delay, properties)

    async def redeliver_unacknowledged_messages(self) -> None:
        await asyncio.gather(*(c.redeliver_unacknowledged_messages() for c in self.consumers))

    async def seek(self, target) -> None:
        await asyncio.gather(*(c.seek(target) for c in self.consumers))

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers))

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self.consumers[0].subscription_name()

    @property
    def closed(self) -> bool:
        return all(c.closed for c in self.consumers)

    def start_listener(self, call, executor=None) -> None:
        from magnetar.asyncio.consumer import start_listener

        self._pumps.append(start_listener(self, call, executor))

    async def close(self) -> None:
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*(c.close() for c in self.consumers))
