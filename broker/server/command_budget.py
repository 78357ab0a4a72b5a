"""How much of the broker's one event loop a single connection may claim with work that moves no data.

Data commands are bounded by what they hold (unanswered SENDs, ACK ids waiting: broker.server.tasks). Two other
kinds of work are cheap one at a time and ruinous back to back, because each still costs the loop a parse, a
lookup and a reply while every other client waits its turn:

- control commands (PRODUCER, SUBSCRIBE, LOOKUP, ...): 10,000 producer creates pipelined on one connection
  held the loop for most of a second;
- wasted work: a command the broker refuses (a SEND with a poison batch count, an unknown producer id, ...) and
  an acknowledged position that names no entry of the topic (far-future or invented ids);
- acknowledgements of entries the consumer was not sent (or has acknowledged already). Acknowledging a real
  entry is allowed, as in Pulsar, whoever was sent it; but the acks of what a consumer *was* sent are bounded by
  what the broker dispatched (permits, unacked limits), while these are bounded by nothing: an ACK bomb naming
  1,000 real entries per frame, back to back, held about half of the loop. Measured with the official client
  (pulsar-client 3.13) consuming at full speed and acking every message: every id it sends names an entry it was
  sent, so it never spends this bucket; after a reconnect it acks at most what it held (its receiver queue and
  unacked messages) -- a burst well inside one second of the default rate.

Each kind has a token bucket per connection. A connection that spends beyond one is not refused and not closed:
the broker stops reading it (and handling the frames it already read) until the bucket has refilled, so the
cost falls on the client that caused it. Well-behaved clients stay far inside both: an official client creates
a producer per partition and acknowledges what it was sent.
"""

from __future__ import annotations

import time
from typing import Callable

from magnetar.protocol import pulsar_api_pb2 as pb

T = pb.BaseCommand
BUDGET_SPENT = "command budget spent"

# The data path and the session's own upkeep; everything else is a control command.
DATA_COMMANDS = frozenset({
    T.SEND, T.ACK, T.FLOW, T.PING, T.PONG, T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.CONNECT, T.AUTH_RESPONSE,
})


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved. Taking may go into debt; ``wait_s`` says how long
    until the debt is repaid."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst <= 0:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, n: float = 1.0) -> None:
        self._refill()
        self._tokens -= n

    def wait_s(self) -> float:
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


def _bucket(rate: float, burst: float, clock: Callable[[], float]) -> TokenBucket | None:
    return TokenBucket(rate, max(burst, 1.0), clock) if rate > 0 else None


class CommandBudget:
    """One connection's buckets. A rate of 0 turns that bucket off.

    The control bucket's burst is set on its own (``control_burst``, default one second of the rate): a client
    creating a producer on each partition of a partitioned topic, or re-creating all of its producers and
    consumers after a reconnect, sends a LOOKUP and a PRODUCER (or SUBSCRIBE) per partition at once, while
    nothing legitimate creates producers at a high steady rate. The other bursts are one second of their rate:
    a few hundred refusals at once (a producer's queue meeting a terminated topic) are normal, and a larger burst
    of wasted work is a stall for everyone (10,000 refused SENDs handled back to back held the loop ~0.3 s).
    """

    def __init__(self, control_per_s: float, wasted_per_s: float, undispatched_acks_per_s: float = 0.0,
                 control_burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        self._control = _bucket(control_per_s, control_per_s if control_burst is None else control_burst, clock)
        self._wasted = _bucket(wasted_per_s, wasted_per_s, clock)
        self._undispatched = _bucket(undispatched_acks_per_s, undispatched_acks_per_s, clock)
        self.wasted_total = 0  # for the connection's stats and the log line when it is throttled
        self.undispatched_acks_total = 0

    def command(self, command_type: int) -> None:
        if self._control is not None and command_type not in DATA_COMMANDS:
            self._control.take()

    def wasted(self, n: int = 1) -> None:
        self.wasted_total += n
        if self._wasted is not None:
            self._wasted.take(n)

    def undispatched_acks(self, n: int) -> None:
        """``n`` acknowledged ids named entries the consumer was not sent (or had acknowledged already)."""
        self.undispatched_acks_total += n
        if self._undispatched is not None:
            self._undispatched.take(n)

    def wait_s(self) -> float:
        """How long this connection must wait before its next frame is handled (0: go on)."""
        return max((b.wait_s() for b in (self._control, self._wasted, self._undispatched) if b is not None),
                   default=0.0)
