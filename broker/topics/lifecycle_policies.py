"""Message-lifecycle policies: their documents in Pulsar's JSON shapes, and the pure decisions that apply them.

Documents (checked here, stored in namespace or topic policies under
Pulsar's field names):

- ``message_ttl_in_seconds``: an int; 0 = messages never expire.
- ``backlog_quota_map``: ``{"destination_storage" | "message_age": {"limitSize": bytes, "limitTime": s,
  "policy": "producer_request_hold" | "producer_exception" | "consumer_backlog_eviction"}}``.
- ``persistence``: ``{"bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum",
  "managedLedgerMaxMarkDeleteRate"}`` for the ledgers the topic creates from then on.
- ``inactive_topic_policies``: ``{"inactiveTopicDeleteMode": "delete_when_no_subscriptions" |
  "delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds", "deleteWhileInactive"}``.
- ``subscription_expiration_time_minutes``: an int; 0 = subscriptions never expire.

The decisions (``quota_breach``, ``expiry_cutoff_ms``, ``entries_to_evict``,
``inactive_topic_deletable``, ``subscription_expired``) take every input,
the clock included, as arguments, so tests drive them from tables.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

MAX_INT = 2**31 - 1  # Pulsar's int policy fields
MAX_LONG = 2**63 - 1


class PolicyDocumentError(ValueError):
    """A policy document does not have Pulsar's shape; the message names the field."""


class RetentionPolicy(str, enum.Enum):
    """What happens when a backlog quota is exceeded (Pulsar's BacklogQuota.RetentionPolicy)."""

    producer_request_hold = "producer_request_hold"
    producer_exception = "producer_exception"
    consumer_backlog_eviction = "consumer_backlog_eviction"


QUOTA_TYPES = ("destination_storage", "message_age")
INACTIVE_DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


def _int(doc: dict, name: str, *, minimum: int, maximum: int, default: int) -> int:
    value = doc.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise PolicyDocumentError(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}"[:300])
    return value


def _object(doc, what: str, fields: tuple[str, ...]) -> dict:
    if not isinstance(doc, dict):
        raise PolicyDocumentError(f"{what} must be a JSON object with {', '.join(fields)}, got {doc!r}"[:300])
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        raise PolicyDocumentError(f"unknown {what} field(s) {unknown}; fields are {list(fields)}"[:300])
    return doc


def check_ttl(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise PolicyDocumentError(f"messageTTL must be an integer number of seconds in 0..{MAX_INT}, got {value!r}"[:300])
    return value


@dataclass(frozen=True)
class BacklogQuota:
    limit_size: int  # bytes; -1 = no size limit
    limit_time: int  # seconds; -1 = no age limit
    policy: RetentionPolicy

    def to_json(self) -> dict:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy.value}

    @classmethod
    def from_json(cls, doc) -> "BacklogQuota":
        doc = _object(doc, "backlog quota", ("limit", "limitSize", "limitTime", "policy"))
        # "limit" is the older name of limitSize, which Pulsar still reads.
        size = _int(doc, "limitSize" if "limitSize" in doc else "limit", minimum=-1, maximum=MAX_LONG, default=-1)
        age = _int(doc, "limitTime", minimum=-1, maximum=MAX_INT, default=-1)
        policy = doc.get("policy", RetentionPolicy.producer_request_hold.value)
        try:
            policy = RetentionPolicy(policy)
        except (ValueError, TypeError):
            raise PolicyDocumentError(f"policy must be one of {[p.value for p in RetentionPolicy]}, got {policy!r}"[:300])
        return cls(size, age, policy)


def check_quota_type(name: str | None) -> str:
    name = name or "destination_storage"
    if name not in QUOTA_TYPES:
        raise PolicyDocumentError(f"backlogQuotaType must be one of {list(QUOTA_TYPES)}, got {name!r}"[:300])
    return name


def check_quota_map(doc) -> dict:
    """A stored ``backlog_quota_map``, checked; canonical JSON."""
    if not isinstance(doc, dict) or not set(doc) <= set(QUOTA_TYPES):
        raise PolicyDocumentError(f"backlog_quota_map must be a JSON object keyed by {list(QUOTA_TYPES)}")
    return {kind: BacklogQuota.from_json(q).to_json() for kind, q in doc.items()}


def quotas_of(quota_map: dict | None) -> list[BacklogQuota]:
    return [BacklogQuota.from_json(q) for q in (quota_map or {}).values()]


PERSISTENCE_FIELDS = ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum",
                      "managedLedgerMaxMarkDeleteRate")
MAX_ENSEMBLE = 64


def check_persistence(doc) -> dict:
    doc = _object(doc, "persistence policies", PERSISTENCE_FIELDS)
    e = _int(doc, "bookkeeperEnsemble", minimum=1, maximum=MAX_ENSEMBLE, default=2)
    qw = _int(doc, "bookkeeperWriteQuorum", minimum=1, maximum=MAX_ENSEMBLE, default=2)
    qa = _int(doc, "bookkeeperAckQuorum", minimum=1, maximum=MAX_ENSEMBLE, default=2)
    if not e >= qw >= qa:
        raise PolicyDocumentError(f"persistence needs bookkeeperEnsemble >= bookkeeperWriteQuorum >= "
                                  f"bookkeeperAckQuorum, got {e}/{qw}/{qa}")
    rate = doc.get("managedLedgerMaxMarkDeleteRate", 0.0)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate <= 1e9 or rate != rate:
        raise PolicyDocumentError(f"managedLedgerMaxMarkDeleteRate must be a number in 0..1e9, got {rate!r}"[:300])
    return {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": qw, "bookkeeperAckQuorum": qa,
            "managedLedgerMaxMarkDeleteRate": float(rate)}


INACTIVE_FIELDS = ("inactiveTopicDeleteMode", "maxInactiveDurationSeconds", "deleteWhileInactive")


def check_inactive_topic_policies(doc) -> dict:
    doc = _object(doc, "inactive topic policies", INACTIVE_FIELDS)
    mode = doc.get("inactiveTopicDeleteMode", INACTIVE_DELETE_MODES[0])
    if mode not in INACTIVE_DELETE_MODES:
        raise PolicyDocumentError(f"inactiveTopicDeleteMode must be one of {list(INACTIVE_DELETE_MODES)}, got {mode!r}"[:300])
    seconds = _int(doc, "maxInactiveDurationSeconds", minimum=0, maximum=MAX_INT, default=60)
    enabled = doc.get("deleteWhileInactive", False)
    if not isinstance(enabled, bool):
        raise PolicyDocumentError(f"deleteWhileInactive must be a JSON bool, got {enabled!r}"[:300])
    return {"inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": seconds, "deleteWhileInactive": enabled}


def check_minutes(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise PolicyDocumentError(f"{name} must be an integer in 0..{MAX_INT}, got {value!r}"[:300])
    return value


# ---- decisions ---------------------------------------------------------------------


def expiry_cutoff_ms(ttl_s: int, now_ms: int) -> int | None:
    """Messages published before this instant have outlived ``ttl_s``; None when the TTL is off (0 or less)."""
    if ttl_s is None or ttl_s <= 0:
        return None
    return now_ms - ttl_s * 1000


@dataclass(frozen=True)
class QuotaBreach:
    quota: BacklogQuota
    by_size: bool  # else by age


def quota_breach(quotas: list[BacklogQuota], backlog_bytes: int, oldest_age_s: float | None) -> QuotaBreach | None:
    """The first quota the slowest subscription exceeds: its backlog in bytes above ``limitSize`` (when > 0), or
    its oldest unacknowledged message older than ``limitTime`` seconds (when > 0). None when within every quota."""
    for quota in quotas:
        if quota.limit_size > 0 and backlog_bytes > quota.limit_size:
            return QuotaBreach(quota, True)
        if quota.limit_time > 0 and oldest_age_s is not None and oldest_age_s > quota.limit_time:
            return QuotaBreach(quota, False)
    return None


def entries_to_evict(backlog_bytes: int, backlog_entries: int, limit_bytes: int, target_fraction: float = 0.9) -> int:
    """How many of the slowest subscription's oldest entries to skip to bring its backlog back under the size
    limit: down to ``target_fraction`` of it (Pulsar evicts to 90 %, so one eviction is not followed at once by
    another), with entries assumed of the backlog's average size."""
    if backlog_entries <= 0 or backlog_bytes <= limit_bytes:
        return 0
    average = backlog_bytes / backlog_entries
    excess = backlog_bytes - limit_bytes * target_fraction
    return min(backlog_entries, max(1, math.ceil(excess / average)))


def inactive_topic_deletable(policy: dict | None, *, idle_s: float, has_producers: bool, has_consumers: bool,
                             subscriptions: int, backlog: int) -> bool:
    """Whether an idle topic is to be deleted under ``policy`` (the inactive-topic document)."""
    if not policy or not policy.get("deleteWhileInactive"):
        return False
    if has_producers or has_consumers or idle_s < policy.get("maxInactiveDurationSeconds", 60):
        return False
    if policy.get("inactiveTopicDeleteMode") == "delete_when_subscriptions_caught_up":
        return backlog == 0
    return subscriptions == 0


def subscription_expired(expiry_minutes: float | None, *, idle_s: float, has_consumers: bool) -> bool:
    """A durable subscription with no consumer for longer than ``subscriptionExpirationTimeMinutes`` goes."""
    if not expiry_minutes or expiry_minutes <= 0 or has_consumers:
        return False
    return idle_s >= expiry_minutes * 60
