"""Subscriptions: cursors with consumers, and the dispatchers that hand entries to those consumers."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Hashable


class SubscriptionType(enum.IntEnum):
    """The wire values of CommandSubscribe.SubType."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


@dataclass(frozen=True)
class ConsumerRef:
    """What the pure dispatch rules need to know about a consumer.

    The rules only read ``name`` and ``priority_level`` (duck typing), so the
    broker's own ``Consumer`` objects work as well; this type is for callers
    and tests that identify consumers by an opaque ``consumer_id``.
    """

    consumer_id: Hashable
    name: str
    priority_level: int = 0  # 0 is the highest priority, as in Pulsar


async def detach_last_consumer(topic_name: str, subscriptions: dict, sub_name: str, consumer=None):
    """The first half of an unsubscribe, the same on persistent and non-persistent topics: the subscription,
    refused while any consumer other than ``consumer`` (the one asking, if any) is connected, with that consumer
    removed from it. Raises SubscriptionNotFoundError, ConsumerBusyError."""
    from broker.errors import ConsumerBusyError, SubscriptionNotFoundError

    sub = subscriptions.get(sub_name)
    if sub is None:
        raise SubscriptionNotFoundError(f"subscription {sub_name} does not exist on {topic_name}")
    others = [c for c in sub.consumers if c is not consumer]
    if others:
        raise ConsumerBusyError(f"subscription {sub_name} has {len(others)} other consumer(s) connected")
    if consumer is not None:
        await sub.remove_consumer(consumer)
    return sub
