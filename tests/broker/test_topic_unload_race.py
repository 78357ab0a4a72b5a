"""A consumer subscribing while its topic is unloaded is refused, never attached to the closed topic (where it would
wait forever: nobody tells it to reconnect). Scripted: the cursor open is held until the topic has closed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.config import BrokerConfig
from broker.errors import TopicFencedError
from broker.topics.names import parse_topic
from broker.topics.persistent import PersistentTopic
from storage.managed_ledger import InitialPosition


class HeldCursorLedger:
    """A managed ledger whose ``open_cursor`` waits until the test releases it."""

    def __init__(self):
        self.cursors = {}
        self.cursor_requested = asyncio.Event()
        self.release_cursor = asyncio.Event()
        self.closed = False

    async def open_cursor(self, name, initial_position):
        self.cursor_requested.set()
        await self.release_cursor.wait()
        self.cursors[name] = SimpleNamespace(name=name)
        return self.cursors[name]

    async def close(self):
        self.closed = True


async def test_a_subscription_that_completes_after_the_unload_is_refused():
    ml = HeldCursorLedger()
    service = SimpleNamespace(config=BrokerConfig("memory://unused"))
    topic = PersistentTopic(service, parse_topic("persistent://public/default/racing"), ml, SimpleNamespace())
    consumer = SimpleNamespace(name="c")
    subscribing = asyncio.create_task(topic.subscribe(consumer, "sub", None, durable=True,
                                                      initial_position=InitialPosition.LATEST))
    await ml.cursor_requested.wait()
    await topic.close(notify=True)  # the unload runs while the cursor opens
    ml.release_cursor.set()
    with pytest.raises(TopicFencedError, match="being unloaded"):
        await subscribing
    assert topic.subscriptions == {} and ml.closed
