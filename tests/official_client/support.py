"""Helpers for driving the official `pulsar-client` (and `magnetar`) in tests: drain with a deadline, never sleep."""

from __future__ import annotations

import time

import pulsar

import magnetar

# Either client's "nothing arrived in time" (the helpers drive both).
TIMEOUTS = (pulsar.Timeout, magnetar.Timeout)


def receive_n(consumer, n: int, timeout_s: float = 20.0, ack: bool = True) -> list:
    """Receive exactly ``n`` messages (acknowledging each unless told not to) before the deadline."""
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise AssertionError(f"received {len(out)} of {n} messages before the deadline")
        try:
            msg = consumer.receive(timeout_millis=min(left_ms, 1000))
        except TIMEOUTS:
            continue
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def assert_nothing_more(consumer, within_ms: int = 500) -> None:
    """No further message arrives within ``within_ms`` (the broker had time to send one if it would)."""
    try:
        msg = consumer.receive(timeout_millis=within_ms)
    except TIMEOUTS:
        return
    raise AssertionError(f"unexpected extra message {msg.data()!r} (id {msg.message_id()})")


def payloads(messages) -> list[bytes]:
    return [m.data() for m in messages]
