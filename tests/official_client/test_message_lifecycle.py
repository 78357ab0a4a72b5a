"""Message TTL and backlog quotas at namespace and topic level, seen by the official client on a real standalone
broker whose expiry and quota checks run every second."""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from storage.testing.processes import BrokerProcess
from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call as call, receive_n

CHECKS_EVERY_SECOND = {"MAGNETAR_BROKER_MESSAGE_EXPIRY_CHECK_INTERVAL_S": "1",
                       "MAGNETAR_BROKER_BACKLOG_QUOTA_CHECK_INTERVAL_S": "1",
                       "MAGNETAR_BROKER_BROKER_DELETE_INACTIVE_TOPICS_FREQUENCY_S": "1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("lifecycle") / "data", env=dict(CHECKS_EVERY_SECOND))
    b.start(timeout_s=60)
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


@pytest.fixture
def ns(broker) -> str:
    name = f"public/lc-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/admin/v2/namespaces/{name}")[0] == 204
    return name


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def backlog(broker, topic: str, sub: str) -> int:
    status, stats = call(broker, "GET", _path(topic) + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


def fill(client, topic: str, count: int, size: int = 10) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"{i:0{size}d}".encode())
    producer.close()


# ---- TTL -------------------------------------------------------------------------------


def test_a_two_second_ttl_empties_the_backlog_within_five_seconds(broker, client, ns):
    topic = f"persistent://{ns}/ttl"
    assert call(broker, "POST", f"/admin/v2/namespaces/{ns}/messageTTL", 2)[0] == 204
    assert call(broker, "GET", f"/admin/v2/namespaces/{ns}/messageTTL")[1] == 2
    client.subscribe(topic, "idle").close()  # a durable subscription nobody reads
    fill(client, topic, 20)
    published = time.monotonic()
    assert backlog(broker, topic, "idle") == 20  # nothing expires before its time
    wait_until(lambda: backlog(broker, topic, "idle") == 0, 5, "the TTL to expire the backlog")
    elapsed = time.monotonic() - published
    print(f"TTL 2 s, check every 1 s: backlog 0 after {elapsed:.2f} s")
    assert elapsed >= 1.5  # expired by the TTL, not at once

    assert call(broker, "DELETE", f"/admin/v2/namespaces/{ns}/messageTTL")[0] == 204
    assert call(broker, "GET", f"/admin/v2/namespaces/{ns}/messageTTL")[0] == 204  # unset: no body


def test_a_topic_ttl_overrides_its_namespace(broker, client, ns):
    kept, expiring = f"persistent://{ns}/kept", f"persistent://{ns}/expiring"
    assert call(broker, "POST", f"/admin/v2/namespaces/{ns}/messageTTL", 3600)[0] == 204
    for topic in (kept, expiring):
        client.subscribe(topic, "idle").close()
    assert call(broker, "POST", _path(expiring) + "/messageTTL?messageTTL=1")[0] == 204
    assert call(broker, "GET", _path(expiring) + "/messageTTL")[1] == 1
    assert call(broker, "GET", _path(kept) + "/messageTTL?applied=true")[1] == 3600
    assert call(broker, "GET", _path(kept) + "/messageTTL")[0] == 204  # the topic's own: none
    fill(client, kept, 5)
    fill(client, expiring, 5)
    wait_until(lambda: backlog(broker, expiring, "idle") == 0, 5, "the topic's TTL to expire its backlog")
    assert backlog(broker, kept, "idle") == 5


# ---- backlog quotas ---------------------------------------------------------------------


def _quota(broker, ns, policy, *, size=-1, age=-1, kind="destination_storage"):
    status, body = call(broker, "POST", f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType={kind}",
                        {"limitSize": size, "limitTime": age, "policy": policy})
    assert status == 204, body


def test_producer_exception_refuses_producers_with_pulsars_error(broker, client, ns):
    topic = f"persistent://{ns}/exc"
    _quota(broker, ns, "producer_exception", size=100)
    assert call(broker, "GET", f"/admin/v2/namespaces/{ns}/backlogQuotaMap")[1] == {
        "destination_storage": {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"}}
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"x" * 50)  # 500 B of backlog: over the quota

    def refused() -> bool:
        try:
            producer.send(b"more")
            return False
        except pulsar.ProducerBlockedQuotaExceededException:
            return True

    wait_until(refused, 10, "the connected producer to be refused")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)

    assert call(broker, "POST", _path(topic) + "/subscription/slow/skip_all")[0] == 204
    client.create_producer(topic).send(b"accepted again")  # the backlog is gone: producers are welcome


def test_producer_request_hold_holds_sends_until_the_backlog_drops(broker, client, ns):
    topic = f"persistent://{ns}/hold"
    _quota(broker, ns, "producer_request_hold", size=100)
    client.subscribe(topic, "slow").close()
    fill(client, topic, 10, size=50)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)

    held = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = held.subscribe(topic, "slow")
        receive_n(consumer, 10)  # the backlog drains: a producer is admitted again
        wait_until(lambda: backlog(broker, topic, "slow") == 0, 10, "the acks to land")
        held.create_producer(topic).send(b"admitted")
    finally:
        held.close()


def test_producer_request_hold_times_out_a_send_that_stays_held(broker, ns):
    topic = f"persistent://{ns}/hold-timeout"
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        c.subscribe(topic, "slow").close()
        producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
        for _ in range(10):
            producer.send(b"y" * 50)
        _quota(broker, ns, "producer_request_hold", size=100)  # set while the producer is connected

        def held_then_timed_out() -> bool:
            try:
                producer.send(b"held")
                return False
            except (pulsar.Timeout, pulsar.ProducerBlockedQuotaExceededError):
                return True

        wait_until(held_then_timed_out, 15, "a send to stay held until its timeout")
    finally:
        c.close()


def test_a_held_send_goes_out_once_the_backlog_drops(broker, ns):
    topic = f"persistent://{ns}/hold-release"
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        c.subscribe(topic, "slow").close()
        producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        for _ in range(10):
            producer.send(b"z" * 50)
        _quota(broker, ns, "producer_request_hold", size=100)
        wait_until(lambda: not call(broker, "GET", _path(topic) + "/stats")[1]["publishers"], 5,
                   "the held producer to be disconnected")
        results = []
        producer.send_async(b"held", lambda result, _id: results.append(result))
        assert call(broker, "POST", _path(topic) + "/subscription/slow/skip_all")[0] == 204
        wait_until(lambda: results, 25, "the held send to complete")
        assert results == [pulsar.Result.Ok]
        assert backlog(broker, topic, "slow") == 1  # stored once the hold was released
    finally:
        c.close()


def test_consumer_backlog_eviction_moves_the_slowest_cursor(broker, client, ns):
    topic = f"persistent://{ns}/evict"
    client.subscribe(topic, "slow").close()
    fill(client, topic, 50, size=100)
    assert backlog(broker, topic, "slow") == 50
    _quota(broker, ns, "consumer_backlog_eviction", size=1000)

    def evicted() -> bool:
        stats = call(broker, "GET", _path(topic) + "/stats")[1]
        return stats["backlogSize"] <= 1000 and 0 < stats["subscriptions"]["slow"]["msgBacklog"] < 50

    wait_until(evicted, 5, "the eviction to bring the backlog under the quota")
    client.create_producer(topic).send(b"producers are never refused under eviction")
    consumer = client.subscribe(topic, "slow")
    first = receive_n(consumer, 1)[0].data()
    assert first != b"0" * 100  # the oldest messages went


def test_a_message_age_quota_evicts_old_messages(broker, client, ns):
    topic = f"persistent://{ns}/age"
    client.subscribe(topic, "slow").close()
    fill(client, topic, 5)
    _quota(broker, ns, "consumer_backlog_eviction", age=1, kind="message_age")
    wait_until(lambda: backlog(broker, topic, "slow") == 0, 5, "messages older than 1 s to be evicted")


def test_a_topic_quota_overrides_the_namespace(broker, client, ns):
    topic = f"persistent://{ns}/own-quota"
    client.subscribe(topic, "slow").close()
    fill(client, topic, 10, size=50)
    assert call(broker, "POST", _path(topic) + "/backlogQuota",
                {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"})[0] == 204
    assert call(broker, "GET", _path(topic) + "/backlogQuotaMap")[1]["destination_storage"]["policy"] == \
        "producer_exception"
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    assert call(broker, "DELETE", _path(topic) + "/backlogQuota")[0] == 204
    wait_until(lambda: _creates(client, topic), 5, "the producer to be admitted once the quota is removed")


def _creates(client, topic) -> bool:
    try:
        client.create_producer(topic).close()
        return True
    except pulsar.ProducerBlockedQuotaExceededException:
        return False


@pytest.mark.parametrize("path, body, reason", [
    ("backlogQuota", {"limitSize": 10, "policy": "drop_it"}, "policy must be one of"),
    ("backlogQuota?backlogQuotaType=sometimes", {"limitSize": 10}, "backlogQuotaType must be one of"),
    ("messageTTL", -5, "messageTTL must be"),
    ("messageTTL", "soon", "messageTTL must be"),
    ("persistence", {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}, ">="),
    ("inactiveTopicPolicies", {"deleteWhileInactive": "yes"}, "deleteWhileInactive"),
])
def test_bad_policy_documents_get_a_400_naming_the_field(broker, ns, path, body, reason):
    status, answer = call(broker, "POST", f"/admin/v2/namespaces/{ns}/{path}", body)
    assert status == 400 and reason in answer["reason"], answer


# ---- the other lifecycle policies -----------------------------------------------------------


def test_inactive_topics_are_deleted_as_the_policy_says(broker, client, ns):
    idle, subscribed, busy = (f"persistent://{ns}/{n}" for n in ("idle", "subscribed", "busy"))
    assert call(broker, "POST", f"/admin/v2/namespaces/{ns}/inactiveTopicPolicies",
                {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 1,
                 "deleteWhileInactive": True})[0] == 204
    for t in (idle, subscribed, busy):
        assert call(broker, "PUT", _path(t))[0] == 204
    client.subscribe(subscribed, "keeps-it").close()
    producer = client.create_producer(busy)  # connected: never inactive
    wait_until(lambda: call(broker, "GET", _path(idle) + "/stats")[0] == 404, 10, "the idle topic to be deleted")
    assert call(broker, "GET", _path(subscribed) + "/stats")[0] == 200
    assert call(broker, "GET", _path(busy) + "/stats")[0] == 200
    producer.send(b"still here")


def test_a_topic_unacked_limit_applies_to_a_connected_consumer(broker, client, ns):
    topic = f"persistent://{ns}/unacked"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
    assert call(broker, "POST", _path(topic) + "/maxUnackedMessagesOnConsumer", 3)[0] == 204
    wait_until(lambda: call(broker, "GET", _path(topic) + "/stats")[1]["subscriptions"]["s"]["consumers"],
               5, "the consumer to show")
    fill(client, topic, 10)
    held = receive_n(consumer, 3, ack=False)
    stats = call(broker, "GET", _path(topic) + "/stats")[1]["subscriptions"]["s"]["consumers"][0]
    assert stats["unackedMessages"] == 3 and stats["blockedConsumerOnUnackedMsgs"]
    for msg in held:
        consumer.acknowledge(msg)
    receive_n(consumer, 7)  # unblocked by the acks: the rest arrives


def test_the_namespace_document_carries_every_policy(broker, ns):
    for path, body in (("messageTTL", 30), ("persistence", {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3,
                                                             "bookkeeperAckQuorum": 2}),
                       ("subscriptionExpirationTime", 60), ("deduplication", True)):
        assert call(broker, "POST", f"/admin/v2/namespaces/{ns}/{path}", body)[0] == 204
    _quota(broker, ns, "producer_exception", size=1 << 30)
    doc = call(broker, "GET", f"/admin/v2/namespaces/{ns}")[1]
    assert doc["message_ttl_in_seconds"] == 30 and doc["subscription_expiration_time_minutes"] == 60
    assert doc["persistence"]["bookkeeperAckQuorum"] == 2 and doc["deduplication_enabled"] is True
    assert doc["backlog_quota_map"]["destination_storage"]["limitSize"] == 1 << 30


def test_a_topic_written_under_a_persistence_policy_works_and_keeps_it(broker, client, ns):
    topic = f"persistent://{ns}/three-copies"
    body = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 3}
    assert call(broker, "POST", f"/admin/v2/namespaces/{ns}/persistence", body)[0] == 204
    consumer = client.subscribe(topic, "s")
    fill(client, topic, 3)
    assert [m.data() for m in receive_n(consumer, 3)] == [b"0000000000", b"0000000001", b"0000000002"]
    got = call(broker, "GET", f"/admin/v2/namespaces/{ns}/persistence")[1]
    assert got == {**body, "managedLedgerMaxMarkDeleteRate": 0.0}
    assert call(broker, "POST", _path(topic) + "/persistence", {"bookkeeperEnsemble": 4, "bookkeeperWriteQuorum": 4,
                                                                "bookkeeperAckQuorum": 5})[0] == 400


def test_topic_deduplication_turns_on_and_off_while_the_topic_is_loaded(broker, client, ns):
    topic = f"persistent://{ns}/dedup"
    producer = client.create_producer(topic, batching_enabled=False, producer_name="p1")
    assert call(broker, "POST", _path(topic) + "/deduplicationEnabled", True)[0] == 204
    wait_until(lambda: call(broker, "GET", _path(topic) + "/stats")[1]["deduplicationStatus"] == "Enabled", 5,
               "dedup to be enabled on the loaded topic")
    producer.send(b"a", sequence_id=7)
    producer.send(b"a", sequence_id=7)
    assert call(broker, "GET", _path(topic) + "/stats")[1]["msgInCounter"] == 1
    assert call(broker, "GET", _path(topic) + "/deduplicationEnabled")[1] is True
    assert call(broker, "DELETE", _path(topic) + "/deduplicationEnabled")[0] == 204
    wait_until(lambda: call(broker, "GET", _path(topic) + "/stats")[1]["deduplicationStatus"] == "Disabled", 5,
               "dedup to be disabled again (the broker default)")
