"""`magnetar-admin` for issue 21's broker side, as subprocesses against a real `broker standalone`: peek, skip,
skip-all, clear-backlog, expire and terminate with the official client producing and seeing the effect;
lifecycle policies set, read back and removed at namespace and topic level; brokers and bookies listings."""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from storage.testing.waiting import wait_until
from tests.admin_cli.support import Admin


@pytest.fixture(scope="module")
def admin(standalone) -> Admin:
    return Admin(standalone.web_url)


@pytest.fixture
def loaded_topic(admin, client):
    """A topic with 5 messages (property k=v) and a subscription "s" at its start."""
    topic = f"persistent://public/default/cli-ops-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=False)
    admin("topics", "create-subscription", topic, "-s", "s").ok()
    ids = [producer.send(f"payload-{i}".encode(), properties={"k": "v"}) for i in range(5)]
    return topic, producer, ids


def _backlog(admin, topic, sub="s") -> int:
    return admin("topics", "stats", topic).json()["subscriptions"][sub]["msgBacklog"]


def test_peek_skip_skip_all_and_clear_backlog(admin, loaded_topic):
    topic, _, ids = loaded_topic
    peeked = admin("topics", "peek-messages", topic, "-s", "s", "-n", "2").ok().stdout
    assert [line for line in peeked.splitlines() if line.startswith("Message ID: ")] == [
        f"Message ID: {i.ledger_id()}:{i.entry_id()}" for i in ids[:2]]
    assert "|payload-0       |" in peeked and '"k": "v"' in peeked
    assert _backlog(admin, topic) == 5  # a peek consumes nothing

    admin("topics", "skip", topic, "-s", "s", "-n", "2").ok()
    assert _backlog(admin, topic) == 3
    assert admin("topics", "peek-messages", topic, "-s", "s").ok().stdout.startswith(
        f"Message ID: {ids[2].ledger_id()}:{ids[2].entry_id()}")
    admin("topics", "skip-all", topic, "-s", "s").ok()
    assert _backlog(admin, topic) == 0

    admin("topics", "reset-cursor", topic, "-s", "s", "-t", "1h").ok()
    assert _backlog(admin, topic) == 5
    admin("topics", "clear-backlog", topic, "-s", "s").ok()
    assert _backlog(admin, topic) == 0

    admin("topics", "reset-cursor", topic, "-s", "s", "-t", "1h").ok()
    admin("namespaces", "clear-backlog", "public/default", "-s", "s", "--force").ok()
    assert _backlog(admin, topic) == 0
    empty = admin("topics", "peek-messages", topic, "-s", "s")
    assert empty.returncode == 1 and "HTTP 404" in empty.stderr


def test_expire_messages(admin, loaded_topic):
    topic, _, _ = loaded_topic
    admin("topics", "expire-messages", topic, "-s", "s", "-t", "1h").ok()
    assert _backlog(admin, topic) == 5  # none is an hour old
    admin("topics", "expire-messages", topic, "-s", "s", "--expireTime", "0").ok()
    assert _backlog(admin, topic) == 0
    admin("topics", "reset-cursor", topic, "-s", "s", "-t", "1h").ok()
    admin("topics", "expire-messages-all-subscriptions", topic, "-t", "0").ok()
    assert _backlog(admin, topic) == 0


def test_terminate(admin, loaded_topic):
    topic, producer, ids = loaded_topic
    out = admin("topics", "terminate", topic).lines()
    assert out == [f"Topic successfully terminated at {ids[-1].ledger_id()}:{ids[-1].entry_id()}"]
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"after the end")
    assert "terminatedPosition" in admin("topics", "info-internal", topic).json()


def test_partitioned_terminate(admin, client):
    topic = f"persistent://public/default/cli-pterm-{uuid.uuid4().hex[:8]}"
    admin("topics", "create-partitioned-topic", topic, "-p", "2").ok()
    last = client.create_producer(f"{topic}-partition-1", batching_enabled=False).send(b"m")
    out = admin("topics", "partitioned-terminate", topic).lines()
    assert out[1] == (f"Topic {topic}-partition-1 successfully terminated at "
                      f"{last.ledger_id()}:{last.entry_id()}:1")
    assert out[0].startswith(f"Topic {topic}-partition-0 successfully terminated at ") and len(out) == 2
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(f"{topic}-partition-0")
    refused = admin("topics", "partitioned-terminate", f"persistent://public/default/cli-pterm-none-{uuid.uuid4().hex[:8]}")
    assert refused.returncode == 1 and "HTTP 404" in refused.stderr


def test_namespace_policies_set_get_remove(admin):
    ns = f"public/cli-pol-{uuid.uuid4().hex[:8]}"
    admin("namespaces", "create", ns).ok()
    admin("namespaces", "set-message-ttl", ns, "-ttl", "2h").ok()
    assert admin("namespaces", "get-message-ttl", ns).json() == 7200
    admin("namespaces", "remove-message-ttl", ns).ok()
    assert admin("namespaces", "get-message-ttl", ns).lines() == ["null"]

    admin("namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "producer_exception").ok()
    admin("namespaces", "set-backlog-quota", ns, "-lt", "1h", "-p", "consumer_backlog_eviction", "-t", "message_age").ok()
    assert admin("namespaces", "get-backlog-quotas", ns).json() == {
        "destination_storage": {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"},
        "message_age": {"limitSize": -1, "limitTime": 3600, "policy": "consumer_backlog_eviction"}}
    admin("namespaces", "remove-backlog-quota", ns, "-t", "message_age").ok()
    assert list(admin("namespaces", "get-backlog-quotas", ns).json()) == ["destination_storage"]

    admin("namespaces", "set-persistence", ns, "-e", "3", "-w", "2", "-a", "2").ok()
    assert admin("namespaces", "get-persistence", ns).json()["bookkeeperEnsemble"] == 3
    admin("namespaces", "set-max-producers-per-topic", ns, "-p", "2").ok()
    admin("namespaces", "remove-max-producers-per-topic", ns).ok()
    assert admin("namespaces", "get-max-producers-per-topic", ns).lines() == ["null"]
    policies = admin("namespaces", "policies", ns).json()
    assert policies.get("message_ttl_in_seconds") is None
    assert policies["persistence"]["bookkeeperEnsemble"] == 3

    bad = admin("namespaces", "set-persistence", ns, "-e", "1", "-w", "2", "-a", "1")
    assert bad.returncode == 1 and "HTTP 400" in bad.stderr


def test_topic_policies_override_and_applied(admin, client):
    topic = f"persistent://public/default/cli-tpol-{uuid.uuid4().hex[:8]}"
    admin("topics", "create", topic).ok()
    assert admin("topics", "get-message-ttl", topic).lines() == ["null"]
    admin("topics", "set-message-ttl", topic, "-t", "90").ok()
    assert admin("topics", "get-message-ttl", topic).json() == 90
    admin("topics", "set-max-producers", topic, "-p", "1").ok()
    assert admin("topics", "get-max-producers", topic, "--applied").json() == 1
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    admin("topics", "set-retention", topic, "-s", "1G", "-t", "1d").ok()
    assert admin("topics", "get-retention", topic).json() == {"retentionTimeInMinutes": 1440,
                                                              "retentionSizeInMB": 1024}
    admin("topics", "set-backlog-quota", topic, "-l", "1M", "-p", "producer_request_hold").ok()
    assert admin("topics", "get-backlog-quotas", topic).json()["destination_storage"]["limitSize"] == 1024 * 1024
    for policy in ("message-ttl", "max-producers", "retention", "backlog-quota"):
        admin("topics", f"remove-{policy}", topic).ok()
    assert admin("topics", "get-max-producers", topic).lines() == ["null"]


def test_topic_rates_set_get_applied_and_remove(admin, client):
    """The three topic-level rates, and a producer on the loaded topic held to the publish rate set by the CLI."""
    topic = f"persistent://public/default/cli-trate-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=False)
    assert admin("topics", "get-publish-rate", topic).lines() == ["null"]
    admin("topics", "set-publish-rate", topic, "-m", "20").ok()
    assert admin("topics", "get-publish-rate", topic).json() == {"publishThrottlingRateInMsg": 20,
                                                                 "publishThrottlingRateInByte": -1}
    done = []
    started = time.monotonic()
    for i in range(60):  # 3 s worth at 20/s: the first 20 at once, then 20 a second
        producer.send_async(b"x", lambda result, _id: done.append(result))
    wait_until(lambda: len(done) == 60, 20, lambda: f"receipts; have {len(done)}")
    assert time.monotonic() - started >= 1.5
    admin("topics", "set-dispatch-rate", topic, "-md", "50", "-dt", "2", "-rp").ok()
    assert admin("topics", "get-dispatch-rate", topic).json() == {
        "dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 2,
        "relativeToPublishRate": True}
    assert admin("topics", "get-subscription-dispatch-rate", topic).lines() == ["null"]
    admin("topics", "set-subscription-dispatch-rate", topic, "--msg-dispatch-rate", "7").ok()
    assert admin("topics", "get-subscription-dispatch-rate", topic).json()["dispatchThrottlingRateInMsg"] == 7
    for policy in ("publish-rate", "dispatch-rate", "subscription-dispatch-rate"):
        admin("topics", f"remove-{policy}", topic).ok()
        assert admin("topics", f"get-{policy}", topic).lines() == ["null"]
    bad = admin("topics", "set-dispatch-rate", topic, "-dt", "0")
    assert bad.returncode == 1 and "HTTP 400" in bad.stderr and "ratePeriodInSecond" in bad.stderr


def test_brokers_and_bookies(admin, standalone):
    assert admin("brokers", "list", "standalone").lines() == admin("brokers", "list").lines()
    assert len(admin("brokers", "list").lines()) == 1
    missing = admin("brokers", "list", "elsewhere")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr
    assert len(admin("bookies", "list-bookies").json()["bookies"]) == 3
    racks = admin("bookies", "racks-placement").json()
    assert len({info["zone"] for info in racks["default"].values()}) == 3
