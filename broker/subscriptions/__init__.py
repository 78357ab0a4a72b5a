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
