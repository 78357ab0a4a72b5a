"""The batch size an ACK's bitset is read against, from a table: what was dispatched when the consumer tracks
the entry, else the client's claim bounded by the configured maximum and by the bits its ack_set carries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.subscription import Subscription

HUGE = 2**31 - 1


class Wire:
    def __init__(self):
        self.out = self

    def message(self, *args):
        pass


@pytest.mark.parametrize("dispatched, ack_set, claimed, expected", [
    (3, [1], HUGE, 3),  # tracked: the dispatched size, whatever the claim
    (None, [1], HUGE, 64),  # the ACK bomb: one long describes at most 64 messages
    (None, [1, 0], HUGE, 128),
    (None, [1] * 2000, HUGE, 100_000),  # and never more than max_num_messages_in_batch
    (None, [0b101], 10, 10),  # an honest claim (the Java client sends batch_size) is kept
    (None, [1], -5, 0),  # a negative claim: nothing can be read from the bitset
])
def test_the_batch_size_an_ack_is_read_against(dispatched, ack_set, claimed, expected):
    consumer = Consumer(1, "c", Wire(), permits=1000)
    if dispatched is not None:
        consumer.deliver([DispatchedEntry((1, 0), b"x", dispatched)])
    subscription = SimpleNamespace(topic=SimpleNamespace(config=SimpleNamespace(max_num_messages_in_batch=100_000)))
    assert Subscription._batch_size(subscription, consumer, (1, 0), ack_set, claimed) == expected
