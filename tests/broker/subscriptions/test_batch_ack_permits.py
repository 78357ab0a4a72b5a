"""Permits spent on a partly acknowledged batch: only its messages still unacknowledged (Pulsar's rule)."""

from __future__ import annotations

import pytest

from broker.subscriptions.consumer import Consumer, DispatchedEntry


class Wire:
    def __init__(self):
        self.sent = []
        self.out = self  # the consumer writes through connection.out

    def message(self, consumer_id, position, data, redelivery_count, ack_set, partition):
        self.sent.append((position, ack_set))


@pytest.mark.parametrize("num_messages, ack_set, spent", [
    (1, None, 1),
    (100, None, 100),
    (100, [0b1010], 2),  # two of the batch left
    (100, [-1, 0xF], 68),  # all 64 of the first word (a negative long on the wire) and 4 more
    (3, [0b111111], 3),  # bits past the batch size do not count
    (10, [0], 0),
])
def test_a_partly_acknowledged_batch_spends_what_is_left_of_it(num_messages, ack_set, spent):
    consumer = Consumer(1, "c", Wire(), permits=1000)
    consumer.deliver([DispatchedEntry((1, 0), b"x", num_messages, ack_set=ack_set)])
    assert consumer.permits == 1000 - spent
