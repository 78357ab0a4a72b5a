"""Subscriptions: cursors with consumers, and the dispatchers that hand entries to those consumers."""

import enum


class SubscriptionType(enum.IntEnum):
    """The wire values of CommandSubscribe.SubType."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3
