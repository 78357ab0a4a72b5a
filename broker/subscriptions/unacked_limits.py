"""When unacked messages block dispatch to a consumer or to a whole subscription: a pure rule.

Unacked limits have hysteresis, as in Pulsar: a consumer is blocked once its
unacknowledged messages reach ``max_unacked_messages_per_consumer`` and
unblocked when acks bring them down to half (``<= max // 2``); the
subscription (dispatcher) is blocked once all its consumers together reach
``max_unacked_messages_per_subscription`` and unblocked below half
(``< max // 2``). A limit of 0 means unlimited and unblocks at once.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_UNACKED_MESSAGES_PER_CONSUMER = 50_000
DEFAULT_MAX_UNACKED_MESSAGES_PER_SUBSCRIPTION = 200_000


@dataclass(frozen=True)
class UnackedLimits:
    """The unacked-message limits of a Shared or Key_Shared subscription; 0 means unlimited."""

    max_unacked_messages_per_consumer: int = DEFAULT_MAX_UNACKED_MESSAGES_PER_CONSUMER
    max_unacked_messages_per_subscription: int = DEFAULT_MAX_UNACKED_MESSAGES_PER_SUBSCRIPTION

    def validate(self) -> None:
        """Raises ValueError for a negative limit."""
        if self.max_unacked_messages_per_consumer < 0 or self.max_unacked_messages_per_subscription < 0:
            raise ValueError("unacked-message limits must be >= 0 (0 = unlimited)")

    def consumer_blocked(self, was_blocked: bool, unacked_messages: int) -> bool:
        """Whether a consumer holding ``unacked_messages`` is blocked, given whether it was."""
        limit = self.max_unacked_messages_per_consumer
        if limit <= 0:
            return False
        if was_blocked:
            return unacked_messages > limit // 2
        return unacked_messages >= limit

    def subscription_blocked(self, was_blocked: bool, unacked_messages: int) -> bool:
        """Whether the subscription's dispatcher, with ``unacked_messages`` over all consumers, is blocked."""
        limit = self.max_unacked_messages_per_subscription
        if limit <= 0:
            return False
        if was_blocked:
            return unacked_messages >= limit // 2
        return unacked_messages >= limit
