"""The retry-letter topic: ``retry_enable`` / ``reconsume_later`` in magnetar, read back by the official client.

pulsar-client 3.13 (Python) has no retry API of its own (no ``retry_enable``, no ``reconsume_later``, no
``retry_letter_topic`` in ``ConsumerDeadLetterPolicy``), so the interop checked here is an official consumer
reading what magnetar's ``reconsume_later`` wrote: the retry-letter topic with its properties and delay.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from datetime import timedelta

import pulsar
import pytest

import magnetar
from magnetar.asyncio import dead_letter as dl
from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call, assert_nothing_more, receive_n

# ---- pure rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("props, custom, expect_times, expect", [
    ({}, None, 1, {"REAL_TOPIC": "persistent://t/n/a", "ORIGIN_MESSAGE_ID": "1:2:-1", "RECONSUMETIMES": "1",
                   "DELAY_TIME": "500"}),
    ({"k": "v", "RECONSUMETIMES": "3", "REAL_TOPIC": "persistent://t/n/first", "ORIGIN_MESSAGE_ID": "9:9:-1"},
     None, 4, {"k": "v", "REAL_TOPIC": "persistent://t/n/first", "ORIGIN_MESSAGE_ID": "9:9:-1",
               "RECONSUMETIMES": "4", "DELAY_TIME": "500"}),
    ({"k": "v"}, {"k": "w", "RECONSUMETIMES": "7", "n": 5}, 8,  # custom properties go over the message's;
     {"k": "w", "n": "5", "REAL_TOPIC": "persistent://t/n/a", "ORIGIN_MESSAGE_ID": "1:2:-1",
      "RECONSUMETIMES": "8", "DELAY_TIME": "500"}),  # a custom RECONSUMETIMES counts as the previous one (as Java)
])
def test_reconsume_properties(props, custom, expect_times, expect):
    out, times = dl.reconsume_properties(props, "persistent://t/n/a-partition-3", "1:2:-1", 500, custom)
    assert (out, times) == (expect, expect_times)


@pytest.mark.parametrize("mid, text", [
    (magnetar.MessageId(ledger_id=7, entry_id=3), "7:3:-1"),
    (magnetar.MessageId(ledger_id=7, entry_id=3, partition=2), "7:3:2"),
    (magnetar.MessageId(ledger_id=7, entry_id=3, batch_index=4, partition=2, batch_size=10), "7:3:2:4"),
])
def test_origin_message_id_reads_as_the_java_client_writes_it(mid, text):
    assert dl.origin_message_id(mid) == text


@pytest.mark.parametrize("bad", ["x", "-1", "1.5", ""])
def test_a_malformed_reconsume_count_is_refused(bad):
    with pytest.raises(ValueError, match="RECONSUMETIMES"):
        dl.reconsume_properties({"RECONSUMETIMES": bad}, "persistent://t/n/a", "1:2:-1", 0)


@pytest.mark.parametrize("policy, expect", [
    (None, (16, "persistent://t/n/a-s-DLQ", "persistent://t/n/a-s-RETRY")),
    (dl.DeadLetterPolicy(3), (3, "persistent://t/n/a-s-DLQ", "persistent://t/n/a-s-RETRY")),
    (dl.DeadLetterPolicy(2, dead_letter_topic="d", retry_letter_topic="r"), (2, "d", "r")),
])
def test_retry_defaults(policy, expect):
    got = dl.with_retry_defaults(policy, "persistent://t/n/a", "s")
    assert (got.max_redeliver_count, got.dead_letter_topic, got.retry_letter_topic) == expect


@pytest.mark.parametrize("times, dead", [(1, False), (2, False), (3, True)])
def test_reconsume_past_the_limit_goes_to_the_dead_letter_topic(times, dead):
    assert dl.reconsume_goes_to_dead_letter(times, dl.DeadLetterPolicy(2)) is dead


@pytest.mark.parametrize("count", [0, -1, 1.5, None])
def test_a_policy_needs_a_positive_count(count):
    with pytest.raises(ValueError, match="max_redeliver_count"):
        dl.DeadLetterPolicy(count)


# ---- against a real broker ------------------------------------------------------------------------------


@pytest.fixture
def mclient(standalone):
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    yield c
    c.close()


@pytest.fixture
def pclient(client):
    """The official client (tests/fixtures/broker.py), named apart from magnetar's here."""
    return client


def _backlog(broker, topic, sub) -> int:
    name = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.web_url}/admin/v2/persistent/{name}/stats", timeout=10) as resp:
        return json.loads(resp.read())["subscriptions"][sub]["msgBacklog"]


def test_reconsume_later_goes_through_the_retry_topic_then_the_dead_letter_topic(mclient, pclient, standalone, topic):
    retry_topic, dlq = f"{topic}-s-RETRY", f"{topic}-s-DLQ"
    # The official client watches what magnetar writes: retry copies (held until due) and the dead letter.
    retry_watch = pclient.subscribe(retry_topic, "watch", consumer_type=pulsar.ConsumerType.Shared)
    dlq_watch = pclient.subscribe(dlq, "watch")
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True,
                                 dead_letter_policy=magnetar.DeadLetterPolicy(2))
    producer = pclient.create_producer(topic)  # batched: the origin id carries a batch index
    origin = producer.send(b"job", properties={"p": "1"}, partition_key="k1")

    msg = receive_n(consumer, 1, ack=False)[0]
    received = []
    for times in (1, 2):
        asked_at = time.time()
        consumer.reconsume_later(msg, timedelta(milliseconds=1500), properties={"why": f"try {times}"})
        watched = receive_n(retry_watch, 1)[0]
        watched_at = time.time()
        msg = receive_n(consumer, 1, ack=False)[0]
        got_at = time.time()
        assert watched_at - asked_at >= 1.5 and got_at - asked_at >= 1.5, "the retry copy is held for the delay"
        assert got_at - asked_at < 1.5 + 5, "and delivered soon after"
        for m in (watched, msg):
            assert m.data() == b"job" and m.partition_key() == "k1"
            assert m.properties() == {"p": "1", "why": f"try {times}", "RECONSUMETIMES": str(times),
                                      "DELAY_TIME": "1500", "REAL_TOPIC": topic,
                                      "ORIGIN_MESSAGE_ID": dl.origin_message_id(origin)}
        assert msg.topic_name() == retry_topic
        received.append(msg)
    consumer.reconsume_later(msg, timedelta(milliseconds=1500))  # the third: past max_redeliver_count
    dead = receive_n(dlq_watch, 1)[0]
    assert dead.data() == b"job" and dead.partition_key() == "k1"
    assert dead.properties()["RECONSUMETIMES"] == "3" and dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == dl.origin_message_id(origin)
    assert_nothing_more(consumer, within_ms=2500)  # nothing more on the topic nor on the retry topic
    assert_nothing_more(retry_watch, within_ms=100)
    # Every reconsumed message was acknowledged where it came from (acks travel in groups: wait for them).
    for t in (topic, retry_topic):
        wait_until(lambda: _backlog(standalone, t, "s") == 0, 10, f"the backlog of s on {t} to drain")


def test_retry_enable_without_a_policy_uses_the_default_names(mclient, pclient, topic):
    retry_watch = pclient.subscribe(f"{topic}-sub-RETRY", "watch", consumer_type=pulsar.ConsumerType.Shared)
    consumer = mclient.subscribe(topic, "sub", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True)
    assert consumer.topic() == topic  # the topic subscribed to, not the retry-letter topic beside it
    mclient.create_producer(topic).send(b"x")
    msg = receive_n(consumer, 1, ack=False)[0]
    consumer.reconsume_later(msg, timedelta(0))
    copy = receive_n(retry_watch, 1)[0]
    assert copy.data() == b"x" and copy.properties()["RECONSUMETIMES"] == "1" and copy.properties()["DELAY_TIME"] == "0"
    assert receive_n(consumer, 1)[0].data() == b"x"


def test_reconsume_later_needs_retry_enabled_and_a_valid_delay(mclient, topic):
    plain = mclient.subscribe(topic, "plain", consumer_type=magnetar.ConsumerType.Shared)
    retrying = mclient.subscribe(topic, "retrying", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True)
    mclient.create_producer(topic).send(b"x")
    msg = receive_n(plain, 1, ack=False)[0]
    with pytest.raises(magnetar.InvalidConfiguration, match="retry_enable"):
        plain.reconsume_later(msg, timedelta(seconds=1))
    msg = receive_n(retrying, 1, ack=False)[0]
    for bad in (timedelta(seconds=-1), 1000, None):
        with pytest.raises(ValueError, match="delay"):
            retrying.reconsume_later(msg, bad)


def test_reconsume_later_on_a_partitioned_topic_names_the_topic_not_the_partition(mclient, pclient, standalone, topic):
    name = topic.split("://", 1)[1]
    assert admin_call(standalone, "PUT", f"/admin/v2/persistent/{name}/partitions", 2)[0] == 204
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True)
    producer = pclient.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"{i}".encode())
    first = receive_n(consumer, 4, ack=False)
    for msg in first:
        consumer.reconsume_later(msg, timedelta(0))
    again = receive_n(consumer, 4)
    assert sorted(m.data() for m in again) == [b"0", b"1", b"2", b"3"]
    assert {m.properties()["REAL_TOPIC"] for m in again} == {topic}
    assert {m.topic_name() for m in again} == {f"{topic}-s-RETRY"}
    for i in range(2):  # each partition's consumer acknowledged its own messages
        wait_until(lambda: _backlog(standalone, f"{topic}-partition-{i}", "s") == 0, 10, f"partition {i} to drain")


def test_a_failed_reconsume_raises_and_redelivers_the_message(mclient, pclient, standalone, topic):
    ns = f"public/rl-{uuid.uuid4().hex[:8]}"
    admin_call(standalone, "PUT", f"/admin/v2/namespaces/{ns}")
    admin_call(standalone, "POST", f"/admin/v2/namespaces/{ns}/maxProducersPerTopic", 1)
    retry_topic = f"persistent://{ns}/retry"
    pclient.create_producer(retry_topic)  # takes the topic's only producer slot
    consumer = mclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True,
                                 dead_letter_policy=magnetar.DeadLetterPolicy(5, retry_letter_topic=retry_topic))
    mclient.create_producer(topic).send(b"x")
    msg = receive_n(consumer, 1, ack=False)[0]
    with pytest.raises(magnetar.ProducerBusy):
        consumer.reconsume_later(msg, timedelta(seconds=1))
    again = receive_n(consumer, 1)[0]  # redelivered at once, not acknowledged
    assert again.data() == b"x" and again.redelivery_count() == 1 and again.topic_name() == topic


def test_retry_on_a_topics_pattern_needs_a_named_retry_topic(mclient):
    with pytest.raises(magnetar.InvalidConfiguration, match="retry_letter_topic"):
        mclient.subscribe(re.compile("persistent://public/default/none-.*"), "s", retry_enable=True)
