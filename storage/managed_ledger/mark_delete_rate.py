"""How often a cursor's acknowledgements are written: Pulsar's mark-delete rate limit, as a pure decision.

Why: every acknowledgement changes a cursor's state, and persisting each one
costs a cursor-ledger write (and, on a new cursor ledger, a metadata write).
Pulsar bounds this with ``managedLedgerDefaultMarkDeleteRateLimit`` (1.0 per
second per cursor, broker.conf) or a namespace's persistence policy
``managedLedgerMaxMarkDeleteRate``: an ack takes effect in memory at once,
but its position is written only as often as the rate allows. An ack that
may not be written now is answered at once (Pulsar's behaviour), and the
cursor writes its latest state as soon as the rate allows again, and when it
closes. After a crash the acks not yet written are delivered again: the
at-least-once promise, never a loss. Acks the broker itself needs durable
(deduplication snapshots, compaction horizons, admin skips and resets) are
written at once and are not counted.

The limit is a token bucket: ``rate`` tokens a second, holding at most one
second's worth (at least one token), so an idle cursor writes its first ack
at once and a burst of acks costs about ``rate`` writes a second.
``admit`` is the decision: a pure function of the bucket, the time and the
rate; ManagedCursor (cursor.py) keeps the bucket and the timer.
"""

from __future__ import annotations

from typing import NamedTuple


class Bucket(NamedTuple):
    tokens: float
    at: float  # when ``tokens`` was counted


def admit(bucket: Bucket | None, now: float, rate: float) -> tuple[Bucket | None, float]:
    """Whether a mark-delete write may start at ``now``: ``(bucket after, 0.0)`` when it may (a token is taken),
    else ``(bucket after, seconds to wait)``. ``rate`` <= 0 means no limit; ``bucket`` None is a full one."""
    if rate <= 0:
        return bucket, 0.0
    capacity = max(1.0, rate)
    if bucket is None:
        tokens = capacity
    else:
        tokens = min(capacity, bucket.tokens + max(0.0, now - bucket.at) * rate)
    if tokens >= 1.0 - 1e-9:  # a timer set for the exact wait may fire a rounding error early
        return Bucket(max(0.0, tokens - 1.0), now), 0.0
    return Bucket(tokens, now), (1.0 - tokens) / rate
