"""Message lifecycle on a loaded topic: TTL expiry, backlog quotas, and the admin moves of a subscription's cursor.

How it works: every move here is a mark-delete of the subscription's cursor
(skip, clear-backlog, expire, eviction), so it is durable and reaches the
dispatcher the way a cumulative ack does: the read position moves on with
it and entries already queued for redelivery are dropped as deleted when
their turn comes. Positions are found among the *unconsumed* entries
(individually acknowledged ones are jumped over), as Pulsar counts them.

Expiry by time relies on publish times growing along the log (they are the
producers' clocks, so roughly): the newest entry published before the
cut-off is found by binary search, and everything up to it is expired.

The backlog quota is judged on the slowest durable subscription: its
backlog in bytes (entries times the log's average entry size, an estimate
like Pulsar's) and the age of its oldest unacknowledged message. The
decision itself is ``lifecycle_policies.quota_breach``.
"""

from __future__ import annotations

import logging
import time

from broker.errors import ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException, persistence_errors
from broker.topics.lifecycle_policies import (
    BacklogQuota, QuotaBreach, RetentionPolicy, entries_to_evict, expiry_cutoff_ms, quota_breach, quotas_of,
)
from magnetar.protocol.frames import parse_headers_and_payload
from storage.managed_ledger.cursor import unconsumed_positions

log = logging.getLogger(__name__)

MAX_EVICTION_ROUNDS = 8


def now_ms() -> int:
    return int(time.time() * 1000)


def publish_time_ms(entry) -> int:
    md, _, _ = parse_headers_and_payload(entry.data)
    return md.publish_time


# ---- positions among the unconsumed -------------------------------------------------


def first_unconsumed(sub, n: int) -> list:
    """The subscription's first ``n`` unconsumed positions (fewer when its backlog is shorter)."""
    cursor, ml = sub.cursor, sub.topic.ml
    start = ml.normalize(ml.position_after(cursor.mark_delete_position))
    return unconsumed_positions(ml.info, cursor.deleted, start, n)


async def peek(sub, n: int):
    """The ``n``-th (1-based) unconsumed entry of the subscription, or None past its backlog."""
    positions = first_unconsumed(sub, n)
    if len(positions) < n:
        return None
    with persistence_errors(f"peeking at {sub.name}"):
        entries = await sub.topic.ml.read_entries_at([positions[-1]])
    return entries[0] if entries else None


async def skip(sub, n: int) -> int:
    """Consume the subscription's ``n`` oldest unconsumed entries; returns how many were skipped."""
    positions = first_unconsumed(sub, n)
    if positions:
        with persistence_errors(f"skipping messages of {sub.name}"):
            await sub.cursor.mark_delete(positions[-1])
        sub.dispatcher_moved()
    return len(positions)


async def clear_backlog(sub) -> None:
    with persistence_errors(f"clearing the backlog of {sub.name}"):
        await sub.cursor.mark_delete(sub.topic.ml.last_confirmed_entry)
    sub.dispatcher_moved()


async def expire_before(sub, cutoff_ms: int) -> bool:
    """Consume every entry of the subscription published before ``cutoff_ms``; True when the cursor moved."""
    cursor, ml = sub.cursor, sub.topic.ml
    if not cursor.backlog:
        return False
    first = first_unconsumed(sub, 1)
    if not first:
        return False
    with persistence_errors(f"expiring messages of {sub.name}"):
        entries = await ml.read_entries_at(first)
        if not entries or publish_time_ms(entries[0]) >= cutoff_ms:
            return False  # the oldest unconsumed message is still young: nothing to do, no search
        reader = ml.new_non_durable_cursor(start=None, inclusive=True)
        try:
            newest = await reader.find_newest_matching(lambda e: publish_time_ms(e) < cutoff_ms)
        finally:
            await reader.close()
        if newest is None or newest <= cursor.mark_delete_position:
            return False
        await cursor.mark_delete(newest)
    sub.dispatcher_moved()
    return True


async def expire_by_ttl(topic, now: int | None = None) -> int:
    """Apply the topic's effective messageTTL to every durable subscription; returns how many moved."""
    cutoff = expiry_cutoff_ms(topic.limit("message_ttl_in_seconds"), now_ms() if now is None else now)
    if cutoff is None:
        return 0
    moved = 0
    for sub in list(topic.subscriptions.values()):
        if sub.durable and not sub.closed and await expire_before(sub, cutoff):
            moved += 1
    return moved


# ---- backlog quota -------------------------------------------------------------------


def effective_quotas(topic) -> list[BacklogQuota]:
    quota_map = topic.limit("backlog_quota_map")
    if quota_map is not None:
        return quotas_of(quota_map)
    config = topic.config
    if config.backlog_quota_default_limit_bytes <= 0 and config.backlog_quota_default_limit_second <= 0:
        return []
    return [BacklogQuota(config.backlog_quota_default_limit_bytes, config.backlog_quota_default_limit_second,
                         RetentionPolicy(config.backlog_quota_default_retention_policy))]


def _slowest(topic):
    subs = [s for s in topic.subscriptions.values() if s.durable and not s.closed]
    return max(subs, key=lambda s: s.backlog, default=None)


def backlog_bytes(topic, entries: int) -> int:
    ml = topic.ml
    return 0 if not ml.number_of_entries else int(entries * ml.total_size / ml.number_of_entries)


async def oldest_unacked_age_s(topic, now: int) -> float | None:
    """Age of the oldest unconsumed message over the durable subscriptions (None when all caught up)."""
    oldest = None
    for sub in list(topic.subscriptions.values()):
        if not sub.durable or sub.closed or not sub.backlog:
            continue
        first = first_unconsumed(sub, 1)
        entries = await topic.ml.read_entries_at(first) if first else []
        if entries:
            t = publish_time_ms(entries[0])
            oldest = t if oldest is None else min(oldest, t)
    return None if oldest is None else (now - oldest) / 1000


async def current_breach(topic, now: int | None = None) -> QuotaBreach | None:
    quotas = effective_quotas(topic)
    if not quotas:
        return None
    slowest = _slowest(topic)
    if slowest is None or not slowest.backlog:
        return None
    now = now_ms() if now is None else now
    age = await oldest_unacked_age_s(topic, now) if any(q.limit_time > 0 for q in quotas) else None
    return quota_breach(quotas, backlog_bytes(topic, slowest.backlog), age)


def refusal(breach: QuotaBreach, topic):
    """The error a producer gets while ``breach`` lasts (None for eviction, which never refuses)."""
    what = (f"backlog size over {breach.quota.limit_size} bytes" if breach.by_size
            else f"oldest unacknowledged message older than {breach.quota.limit_time} s")
    if breach.quota.policy is RetentionPolicy.producer_exception:
        return ProducerBlockedQuotaExceededException(f"cannot create producer on {topic.name}: {what}")
    if breach.quota.policy is RetentionPolicy.producer_request_hold:
        return ProducerBlockedQuotaExceededError(f"producer on {topic.name} held: {what}")
    return None


async def admit_producer(topic) -> None:
    """Raise the quota error when the topic's backlog quota is exceeded under a producer policy."""
    with persistence_errors(f"checking the backlog quota of {topic.name}"):
        breach = await current_breach(topic)
    if breach is not None:
        error = refusal(breach, topic)
        if error is not None:
            raise error


async def enforce_backlog_quota(topic, now: int | None = None) -> QuotaBreach | None:
    """The periodic check: evict (consumer_backlog_eviction), or disconnect the producers so they reconnect and
    are refused until the backlog drops (Pulsar's way for both producer policies). Returns the breach found."""
    now = now_ms() if now is None else now
    breach = await current_breach(topic, now)
    if breach is None:
        return None
    if breach.quota.policy is RetentionPolicy.consumer_backlog_eviction:
        await _evict(topic, breach, now)
    else:
        for producer in list(topic.producers):
            topic.remove_producer(producer)
            producer.connection.out.close_producer(producer.producer_id)
    topic.quota_enforcements += 1
    return breach


async def _evict(topic, breach: QuotaBreach, now: int) -> None:
    if not breach.by_size:
        cutoff = now - breach.quota.limit_time * 1000
        for sub in list(topic.subscriptions.values()):
            if sub.durable and not sub.closed:
                await expire_before(sub, cutoff)
        return
    for _ in range(MAX_EVICTION_ROUNDS):
        slowest = _slowest(topic)
        if slowest is None:
            return
        size = backlog_bytes(topic, slowest.backlog)
        n = entries_to_evict(size, slowest.backlog, breach.quota.limit_size)
        if not n:
            return
        log.info("backlog quota of %s: evicting %d entries of subscription %s", topic.name, n, slowest.name)
        await skip(slowest, n)
