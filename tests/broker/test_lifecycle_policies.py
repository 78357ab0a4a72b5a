"""The message-lifecycle decisions and documents (broker/topics/lifecycle_policies.py), from tables."""

from __future__ import annotations

import pytest

from broker.topics.lifecycle_policies import (
    BacklogQuota, PolicyDocumentError, RetentionPolicy, check_inactive_topic_policies, check_persistence,
    check_quota_map, check_ttl, entries_to_evict, expiry_cutoff_ms, inactive_topic_deletable, quota_breach,
    subscription_expired,
)

HOLD, EXC, EVICT = RetentionPolicy.producer_request_hold, RetentionPolicy.producer_exception, \
    RetentionPolicy.consumer_backlog_eviction


@pytest.mark.parametrize("ttl, now, cutoff", [
    (0, 10_000, None), (-1, 10_000, None), (None, 10_000, None), (2, 10_000, 8_000), (1, 500, -500),
])
def test_expiry_cutoff(ttl, now, cutoff):
    assert expiry_cutoff_ms(ttl, now) == cutoff


@pytest.mark.parametrize("quotas, size, age, expected", [
    ([], 10**9, 10**6, None),
    ([BacklogQuota(100, -1, EXC)], 100, None, None),  # at the limit is within it
    ([BacklogQuota(100, -1, EXC)], 101, None, (EXC, True)),
    ([BacklogQuota(-1, 10, HOLD)], 10**9, 9.5, None),
    ([BacklogQuota(-1, 10, HOLD)], 0, 10.5, (HOLD, False)),
    ([BacklogQuota(-1, 10, HOLD)], 0, None, None),  # caught up: no oldest message
    ([BacklogQuota(0, 0, EVICT)], 10**9, 10**6, None),  # 0 = that limit off
    ([BacklogQuota(100, -1, EVICT), BacklogQuota(-1, 5, EXC)], 50, 6, (EXC, False)),
])
def test_quota_breach(quotas, size, age, expected):
    breach = quota_breach(quotas, size, age)
    assert (None if breach is None else (breach.quota.policy, breach.by_size)) == expected


@pytest.mark.parametrize("size, entries, limit, evict", [
    (100, 10, 200, 0),  # under the limit
    (0, 0, 10, 0),
    (1000, 10, 500, 6),  # average 100 B; down to 450 B: 550 B over, 6 entries
    (1000, 10, 999, 2),  # just over: down to 90 % (899.1) needs 2 entries
    (10**9, 3, 1, 3),  # never more than the backlog
])
def test_entries_to_evict(size, entries, limit, evict):
    assert entries_to_evict(size, entries, limit) == evict


ON = {"deleteWhileInactive": True, "maxInactiveDurationSeconds": 60, "inactiveTopicDeleteMode": "delete_when_no_subscriptions"}
CAUGHT_UP = {**ON, "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up"}


@pytest.mark.parametrize("policy, idle, producers, consumers, subs, backlog, deletable", [
    (None, 1000, False, False, 0, 0, False),
    ({**ON, "deleteWhileInactive": False}, 1000, False, False, 0, 0, False),
    (ON, 59, False, False, 0, 0, False),
    (ON, 61, False, False, 0, 0, True),
    (ON, 61, True, False, 0, 0, False),
    (ON, 61, False, False, 1, 0, False),  # a subscription keeps it under delete_when_no_subscriptions
    (CAUGHT_UP, 61, False, False, 2, 0, True),
    (CAUGHT_UP, 61, False, False, 2, 5, False),
    (CAUGHT_UP, 61, False, True, 2, 0, False),
])
def test_inactive_topic_deletable(policy, idle, producers, consumers, subs, backlog, deletable):
    assert inactive_topic_deletable(policy, idle_s=idle, has_producers=producers, has_consumers=consumers,
                                    subscriptions=subs, backlog=backlog) is deletable


@pytest.mark.parametrize("minutes, idle, consumers, expired", [
    (0, 10**6, False, False), (None, 10**6, False, False), (1, 59, False, False), (1, 60, False, True),
    (1, 10**6, True, False),
])
def test_subscription_expired(minutes, idle, consumers, expired):
    assert subscription_expired(minutes, idle_s=idle, has_consumers=consumers) is expired


@pytest.mark.parametrize("doc, error", [
    ({"limitSize": 10, "policy": "drop_everything"}, "policy must be one of"),
    ({"limitSize": "10"}, "limitSize must be an integer"),
    ({"limitTime": 2**40}, "limitTime must be an integer"),
    ({"limitSize": 1, "color": "red"}, "unknown backlog quota field"),
    ([1], "must be a JSON object"),
])
def test_bad_quotas_are_refused(doc, error):
    with pytest.raises(PolicyDocumentError, match=error):
        BacklogQuota.from_json(doc)


def test_quota_documents_round_trip():
    quota = BacklogQuota.from_json({"limit": 5, "limitTime": 3, "policy": "producer_exception"})
    assert quota == BacklogQuota(5, 3, EXC)  # "limit" is the old name of limitSize
    assert check_quota_map({"message_age": quota.to_json()}) == {"message_age": quota.to_json()}
    with pytest.raises(PolicyDocumentError, match="keyed by"):
        check_quota_map({"whatever": quota.to_json()})


@pytest.mark.parametrize("doc, error", [
    ({"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 1}, ">="),
    ({"bookkeeperEnsemble": 0}, "bookkeeperEnsemble must be"),
    ({"bookkeeperEnsemble": 2, "managedLedgerMaxMarkDeleteRate": float("nan")}, "managedLedgerMaxMarkDeleteRate"),
    ({"ensemble": 2}, "unknown persistence"),
])
def test_bad_persistence_is_refused(doc, error):
    with pytest.raises(PolicyDocumentError, match=error):
        check_persistence(doc)


def test_documents_get_pulsar_defaults():
    assert check_persistence({"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}) == {
        "bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2,
        "managedLedgerMaxMarkDeleteRate": 0.0}
    assert check_inactive_topic_policies({"deleteWhileInactive": True}) == {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 60,
        "deleteWhileInactive": True}
    with pytest.raises(PolicyDocumentError):
        check_inactive_topic_policies({"inactiveTopicDeleteMode": "sometimes"})
    assert check_ttl(0) == 0
    for bad in (-1, True, "5", 2**31):
        with pytest.raises(PolicyDocumentError):
            check_ttl(bad)


def _persistence(e, qw, qa):
    return {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": qw, "bookkeeperAckQuorum": qa,
            "managedLedgerMaxMarkDeleteRate": 0.0}


@pytest.mark.parametrize("ns, topic, quorum, retention", [
    ({}, {}, (2, 2, 2), (0, 0)),  # the broker's defaults
    ({"persistence": _persistence(3, 3, 2)}, {}, (3, 3, 2), (0, 0)),
    ({"persistence": _persistence(3, 3, 2)}, {"persistence": _persistence(1, 1, 1)}, (1, 1, 1), (0, 0)),
    ({"retention_time_minutes": 10, "retention_size_mb": 5}, {}, (2, 2, 2), (600, 5)),
    ({"retention_time_minutes": 10}, {"retention_time_minutes": -1}, (2, 2, 2), (-1, 0)),
])
def test_a_topics_ledgers_take_its_persistence_and_retention(ns, topic, quorum, retention):
    from broker.config import BrokerConfig
    from broker.ownership.resources import NamespacePolicies
    from broker.service import topic_ledger_config

    config = topic_ledger_config(BrokerConfig(metadata_store_url="memory://"), NamespacePolicies(**ns),
                                 NamespacePolicies(**topic))
    assert (config.ensemble_size, config.write_quorum_size, config.ack_quorum_size) == quorum
    assert (config.retention_time_s, config.retention_size_mb) == retention
