"""Non-persistent topics: messages pass through the broker without storage and are dropped (and counted) when a
subscription has no consumer with permits. Official client and the magnetar client, against `broker standalone`."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

import magnetar
from storage.testing.waiting import wait_until
from tests.admin_cli.support import run as magnetar_admin
from tests.official_client.support import admin_call, assert_nothing_more, payloads, receive_n


@pytest.fixture
def np_topic(request) -> str:
    return f"non-persistent://public/default/{request.node.name[:50]}-{uuid.uuid4().hex[:8]}"


def _stats_path(topic: str) -> str:
    return "/admin/v2/non-persistent/" + topic.split("://", 1)[1] + "/stats"


def _stats(broker, topic: str) -> dict:
    status, body = admin_call(broker, "GET", _stats_path(topic))
    assert status == 200, body
    return body


def _permits_granted(broker, topic: str, sub: str, permits: int) -> bool:
    consumers = _stats(broker, topic)["subscriptions"].get(sub, {}).get("consumers", [])
    return bool(consumers) and consumers[0]["availablePermits"] == permits


def test_produce_and_consume_through_memory(standalone, client, np_topic):
    consumer = client.subscribe(np_topic, "s")
    producer = client.create_producer(np_topic, batching_enabled=False)
    sent = [f"m{i}".encode() for i in range(20)]
    ids = [producer.send(m) for m in sent]
    assert payloads(receive_n(consumer, 20)) == sent
    assert len({str(i) for i in ids}) == 20  # each receipt names its own (synthetic) message id
    stats = _stats(standalone, np_topic)
    assert stats["msgInCounter"] == 20 and stats["msgOutCounter"] == 20
    assert stats["storageSize"] == 0 and stats["msgBacklog"] == 0
    assert stats["subscriptions"]["s"]["msgDropped"] == 0
    status, lookup = admin_call(standalone, "GET", "/lookup/v2/topic/" + np_topic.replace("://", "/"))
    assert status == 200 and lookup["brokerUrl"] == standalone.service_url


def test_nothing_is_kept_for_a_later_subscriber(standalone, client, np_topic):
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"early {i}".encode())
    consumer = client.subscribe(np_topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"after")
    assert payloads(receive_n(consumer, 1)) == [b"after"]
    assert_nothing_more(consumer)


def test_messages_beyond_the_permits_are_dropped_and_counted(standalone, client, np_topic):
    consumer = client.subscribe(np_topic, "slow", receiver_queue_size=10)
    # The client grants its queue's worth of permits after subscribing; nothing is received (so no more are
    # granted) until every message was sent.
    wait_until(lambda: _permits_granted(standalone, np_topic, "slow", 10), 10, "the consumer's 10 permits")
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(50):
        producer.send(f"{i}".encode())
    stats = _stats(standalone, np_topic)
    sub = stats["subscriptions"]["slow"]
    assert (sub["msgDropped"], sub["msgOutCounter"], stats["msgDropped"]) == (40, 10, 40)
    assert stats["msgInCounter"] == 50
    via_cli = magnetar_admin("topics", "stats", np_topic, url=standalone.web_url).json()
    assert via_cli["subscriptions"]["slow"]["msgDropped"] == 40
    assert payloads(receive_n(consumer, 10)) == [f"{i}".encode() for i in range(10)]
    assert_nothing_more(consumer)  # the 40 dropped are gone: no cursor, no redelivery


def test_shared_consumers_split_the_messages(standalone, client, np_topic):
    a = client.subscribe(np_topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(np_topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    wait_until(lambda: len(_stats(standalone, np_topic)["subscriptions"]["shared"]["consumers"]) == 2, 10,
               "both consumers attached")
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"{i}".encode())
    got_a, got_b = receive_n(a, 10), receive_n(b, 10)
    assert sorted(int(m.data()) for m in got_a + got_b) == list(range(20))
    assert_nothing_more(a)
    assert_nothing_more(b)


def _both_attached(broker, topic, sub):
    return lambda: len(_stats(broker, topic)["subscriptions"].get(sub, {}).get("consumers", [])) == 2


def test_key_shared_keeps_each_key_on_one_consumer(standalone, client, np_topic):
    consumers = [client.subscribe(np_topic, "keyed", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)]
    wait_until(_both_attached(standalone, np_topic, "keyed"), 10, "both consumers attached")
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"k{i % 8}")
    holders: dict[str, set[int]] = {}
    total = 0
    for n, consumer in enumerate(consumers):
        while True:
            try:
                msg = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            holders.setdefault(msg.partition_key(), set()).add(n)
            total += 1
    assert total == 40 and len(holders) == 8
    assert all(len(h) == 1 for h in holders.values())  # no key split between consumers


def test_failover_sends_everything_to_the_active_consumer(standalone, client, np_topic):
    first = client.subscribe(np_topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(np_topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    wait_until(_both_attached(standalone, np_topic, "fo"), 10, "both consumers attached")
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"{i}".encode())
    assert payloads(receive_n(first, 10)) == [f"{i}".encode() for i in range(10)]  # "a" sorts first: active
    assert_nothing_more(second)


def test_exclusive_subscription_refuses_a_second_consumer(client, np_topic):
    client.subscribe(np_topic, "only")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(np_topic, "only")


def test_subscription_goes_with_its_last_consumer(standalone, client, np_topic):
    producer = client.create_producer(np_topic)
    consumer = client.subscribe(np_topic, "gone")
    assert "gone" in _stats(standalone, np_topic)["subscriptions"]
    consumer.close()
    wait_until(lambda: "gone" not in _stats(standalone, np_topic)["subscriptions"], 10, "the subscription gone")
    producer.send(b"to nobody")
    assert _stats(standalone, np_topic)["msgDropped"] == 0  # no subscription: nobody to drop it for


def test_regex_subscription_modes_see_the_right_domains(client):
    """The official Python client's own regex-subscription test (apache/pulsar-client-python, tests/pulsar_test.py
    test_regex_subscription), with names of its own."""
    tag = uuid.uuid4().hex[:8]
    topic1 = f"persistent://public/default/rx-{tag}-1"
    topic2 = f"persistent://public/default/rx-{tag}-2"
    topic3 = f"non-persistent://public/default/rx-{tag}-3"
    topic4 = f"persistent://public/default/no-match-rx-{tag}-3"
    producers = [client.create_producer(t) for t in (topic1, topic2, topic3, topic4)]
    pattern = re.compile(f"public/default/rx-{tag}-.*")
    mode = pulsar.RegexSubscriptionMode
    consumers = {
        m: client.subscribe(pattern, f"rx-{m}", consumer_type=pulsar.ConsumerType.Shared, regex_subscription_mode=m)
        for m in (mode.AllTopics, mode.PersistentOnly, mode.NonPersistentOnly)
    }
    for i in range(10):
        for n, p in enumerate(producers, 1):
            p.send(b"hello-%d-%d" % (n, i))
    expected = {mode.AllTopics: {topic1, topic2, topic3}, mode.PersistentOnly: {topic1, topic2},
                mode.NonPersistentOnly: {topic3}}
    for m, topics in expected.items():
        got = receive_n(consumers[m], 10 * len(topics))
        assert {msg.topic_name() for msg in got} == topics, m
        assert_nothing_more(consumers[m], within_ms=300)


def test_magnetar_client_produces_and_consumes(standalone, np_topic):
    mclient = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        consumer = mclient.subscribe(np_topic, "m")
        producer = mclient.create_producer(np_topic, batching_enabled=True, batching_max_publish_delay_ms=5)
        sent = [f"m{i}".encode() for i in range(30)]
        for m in sent:
            producer.send(m)
        got = receive_n(consumer, 30)
        assert payloads(got) == sent
        assert_nothing_more(consumer)
        assert _stats(standalone, np_topic)["subscriptions"]["m"]["msgOutCounter"] == 30
    finally:
        mclient.close()


def test_an_idle_topic_is_forgotten_and_comes_back(start_standalone):
    broker = start_standalone(env={"MAGNETAR_BROKER_MAINTENANCE_INTERVAL_S": "0.5"})
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=15)
    topic = f"non-persistent://public/default/idle-{uuid.uuid4().hex[:8]}"
    try:
        client.create_producer(topic).close()
        wait_until(lambda: admin_call(broker, "GET", _stats_path(topic))[0] == 404, 15, "the idle topic forgotten")
        consumer = client.subscribe(topic, "back")
        client.create_producer(topic).send(b"again")
        assert payloads(receive_n(consumer, 1)) == [b"again"]
    finally:
        client.close()


def test_stats_of_a_topic_nobody_uses_is_404(standalone):
    status, body = admin_call(standalone, "GET", _stats_path(f"non-persistent://public/default/none-{uuid.uuid4().hex}"))
    assert status == 404 and "not served" in body["reason"]


# ---- partitioned non-persistent topics --------------------------------------------------------------------------


def _partitions_path(topic: str) -> str:
    return "/admin/v2/non-persistent/" + topic.split("://", 1)[1] + "/partitions"


def test_a_partitioned_non_persistent_topic_produces_and_consumes_across_its_partitions(standalone, client, np_topic):
    assert admin_call(standalone, "PUT", _partitions_path(np_topic), 3)[0] == 204
    assert admin_call(standalone, "GET", _partitions_path(np_topic)) == (200, {"partitions": 3})
    ns = "/admin/v2/non-persistent/public/default"
    assert np_topic in admin_call(standalone, "GET", ns + "/partitioned")[1]
    consumer = client.subscribe(np_topic, "s")  # the client subscribes to each partition
    producer = client.create_producer(np_topic, batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    for i in range(30):
        producer.send(f"m{i}".encode())
    got = receive_n(consumer, 30)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
    assert {m.topic_name() for m in got} == {f"{np_topic}-partition-{i}" for i in range(3)}
    for i in range(3):  # each partition a non-persistent topic of its own, with its own stats
        assert _stats(standalone, f"{np_topic}-partition-{i}")["msgInCounter"] == 10
    # Discovery lists the partitions (a regex consumer subscribes to them).
    listed = admin_call(standalone, "GET", ns)[1]
    assert {f"{np_topic}-partition-{i}" for i in range(3)} <= set(listed)
    # The partitioned topic as a whole takes no producer of its own on the wire.
    status, answer = admin_call(standalone, "PUT", _partitions_path(np_topic), 2)
    assert status == 409
    producer.close()
    consumer.close()
    assert admin_call(standalone, "DELETE", _partitions_path(np_topic))[0] == 204
    assert admin_call(standalone, "GET", _partitions_path(np_topic)) == (200, {"partitions": 0})


def test_partitioned_non_persistent_bad_input(standalone, np_topic):
    assert admin_call(standalone, "PUT", _partitions_path(np_topic), "three")[0] == 400
    assert admin_call(standalone, "PUT", _partitions_path(np_topic), 0)[0] == 405
    assert admin_call(standalone, "DELETE", _partitions_path(np_topic))[0] == 404
    assert admin_call(standalone, "GET", "/admin/v2/non-persistent/public/default/0x0_0xzz")[0] == 412


# ---- pulsar-admin's topic commands on non-persistent topics ------------------------------------------------------


def _back_with_permits(broker, topic: str, sub: str):
    def check() -> bool:
        status, body = admin_call(broker, "GET", _stats_path(topic))
        consumers = body.get("subscriptions", {}).get(sub, {}).get("consumers", []) if status == 200 else []
        return bool(consumers) and consumers[0]["availablePermits"] > 0
    return check


def test_subscriptions_unsubscribe_unload_and_delete_through_magnetar_admin(standalone, client, np_topic):
    def admin(*args):
        return magnetar_admin(*args, url=standalone.web_url)

    consumer = client.subscribe(np_topic, "s")
    producer = client.create_producer(np_topic, batching_enabled=False)
    assert admin("topics", "subscriptions", np_topic).lines() == ["s"]
    busy = admin("topics", "unsubscribe", np_topic, "-s", "s")
    assert busy.returncode == 1 and "HTTP 412" in busy.stderr and "consumer" in busy.stderr
    refused = admin("topics", "delete", np_topic)
    assert refused.returncode == 1 and "HTTP 405" in refused.stderr
    producer.send(b"before")
    assert consumer.receive(10_000).data() == b"before"

    admin("topics", "unload", np_topic).ok()  # the clients look the topic up again: a fresh topic in memory
    wait_until(_back_with_permits(standalone, np_topic, "s"), 30, "the consumer back on the unloaded topic")
    producer.send(b"after")
    assert consumer.receive(10_000).data() == b"after"
    assert _stats(standalone, np_topic)["msgInCounter"] == 1  # counted by the new topic only

    admin("topics", "delete", np_topic, "-f").ok()
    status, body = admin_call(standalone, "GET", _stats_path(np_topic))
    assert status == 404 or body["msgInCounter"] == 0  # gone, or loaded afresh by the clients coming back
    producer.close()
    consumer.close()
    missing = admin("topics", "delete", f"non-persistent://public/default/none-{uuid.uuid4().hex[:8]}")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr


def test_a_partitioned_non_persistent_topics_subscriptions_and_unload(standalone, client, np_topic):
    assert admin_call(standalone, "PUT", _partitions_path(np_topic), 2)[0] == 204
    consumer = client.subscribe(np_topic, "p")
    assert magnetar_admin("topics", "subscriptions", np_topic, url=standalone.web_url).lines() == ["p"]
    magnetar_admin("topics", "unload", np_topic, url=standalone.web_url).ok()
    for i in range(2):  # each partition closed and come back with the consumer on it
        wait_until(_back_with_permits(standalone, f"{np_topic}-partition-{i}", "p"), 30, f"partition {i} back")
        assert _stats(standalone, f"{np_topic}-partition-{i}")["msgInCounter"] == 0
    consumer.close()


def test_topic_policies_of_a_non_persistent_topic_apply_to_it_alone(standalone, client, np_topic):
    def admin(*args):
        return magnetar_admin(*args, url=standalone.web_url)

    twin = np_topic.replace("non-persistent://", "persistent://")  # same name, the other domain
    consumer = client.subscribe(np_topic, "s")  # a non-persistent topic exists while it is used
    admin("topics", "set-max-producers", np_topic, "-p", "1").ok()
    assert admin("topics", "get-max-producers", np_topic).json() == 1
    admin("topics", "set-publish-rate", np_topic, "-m", "1000").ok()
    assert admin("topics", "get-publish-rate", np_topic).json()["publishThrottlingRateInMsg"] == 1000
    first = client.create_producer(np_topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(np_topic)
    twins = [client.create_producer(twin) for _ in range(2)]  # the persistent topic keeps its own policies
    assert admin("topics", "get-max-producers", twin).lines() == ["null"]
    admin("topics", "remove-max-producers", np_topic).ok()
    second = client.create_producer(np_topic)
    for p in (first, second, *twins):
        p.close()
    consumer.close()
    missing = admin("topics", "set-max-producers", f"non-persistent://public/default/none-{uuid.uuid4().hex[:8]}",
                    "-p", "1")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr
