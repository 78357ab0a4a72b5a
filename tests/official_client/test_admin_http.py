"""The HTTP side on 8080: admin REST in Pulsar's shapes, lookup, health and metrics, with their error codes."""

from __future__ import annotations


import pulsar
import pytest

from tests.official_client.support import admin_call as call, payloads, receive_n


def test_tenants_and_namespaces(standalone):
    assert call(standalone, "PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": ["standalone"]})[0] == 204
    assert "acme" in call(standalone, "GET", "/admin/v2/tenants")[1]
    assert call(standalone, "PUT", "/admin/v2/tenants/acme", {})[0] == 409
    assert call(standalone, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(standalone, "GET", "/admin/v2/namespaces/acme")[1] == ["acme/orders"]
    assert call(standalone, "POST", "/admin/v2/namespaces/acme/orders/retention",
                {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100})[0] == 204
    assert call(standalone, "GET", "/admin/v2/namespaces/acme/orders/retention")[1] == \
        {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert call(standalone, "POST", "/admin/v2/namespaces/acme/orders/maxProducersPerTopic", 1)[0] == 204
    assert call(standalone, "GET", "/admin/v2/namespaces/acme/orders/maxProducersPerTopic")[1] == 1
    status, body = call(standalone, "DELETE", "/admin/v2/tenants/acme")
    assert status == 405 and "still has namespaces" in body["reason"]
    assert call(standalone, "DELETE", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(standalone, "DELETE", "/admin/v2/tenants/acme")[0] == 204
    assert call(standalone, "GET", "/admin/v2/tenants/acme")[0] == 404


def test_a_namespace_is_created_with_the_bundles_asked_for(standalone, client):
    assert call(standalone, "PUT", "/admin/v2/namespaces/public/eight", {"bundles": {"numBundles": 8}})[0] == 204
    status, bundles = call(standalone, "GET", "/admin/v2/namespaces/public/eight/bundles")
    assert status == 200 and bundles["numBundles"] == 8 and len(bundles["boundaries"]) == 9
    topic = "persistent://public/eight/t"
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"in one of eight bundles")
    assert payloads(receive_n(consumer, 1)) == [b"in one of eight bundles"]

    status, body = call(standalone, "PUT", "/admin/v2/namespaces/public/too-many", {"bundles": {"numBundles": 1000}})
    assert status == 412 and "at most 128" in body["reason"]
    assert call(standalone, "GET", "/admin/v2/namespaces/public/too-many")[0] == 404  # refused means not created
    status, body = call(standalone, "PUT", "/admin/v2/namespaces/public/eight", {"bundles": {"numBundles": 2}})
    assert status == 409 and "already exists" in body["reason"]
    assert call(standalone, "GET", "/admin/v2/namespaces/public/eight/bundles")[1]["numBundles"] == 8


def test_namespace_limit_is_enforced_for_producers(standalone):
    call(standalone, "PUT", "/admin/v2/namespaces/public/limited")
    call(standalone, "POST", "/admin/v2/namespaces/public/limited/maxProducersPerTopic", 1)
    client = pulsar.Client(standalone.service_url)
    try:
        client.create_producer("persistent://public/limited/t")
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer("persistent://public/limited/t")
    finally:
        client.close()


@pytest.mark.parametrize("method, path, body, raw, status, reason", [
    ("PUT", "/admin/v2/persistent/public/default/bad%01name", None, None, 412, "control characters"),
    ("GET", "/admin/v2/persistent/public/default/no-such-topic/stats", None, None, 404, "does not exist"),
    ("GET", "/admin/v2/namespaces/no-such-tenant/x", None, None, 404, "does not exist"),
    ("PUT", "/admin/v2/persistent/public/default/p/partitions", None, b"{not json", 400, "not valid JSON"),
    ("PUT", "/admin/v2/persistent/public/default/p/partitions", None, b'"three"', 400, "number of partitions"),
    ("PUT", "/admin/v2/persistent/public/default/p0/partitions", 0, None, 405, "at least 1 partition"),
    ("PUT", "/admin/v2/persistent/public/default/p1/partitions", 10_001, None, 405, "at most 10000"),
    ("PUT", "/admin/v2/non-persistent/public/default/p1/partitions", 2**62, None, 405, "at most 10000"),
    ("POST", "/admin/v2/namespaces/public/default/deduplication", "yes", None, 400, "bool"),
    ("PUT", "/admin/v2/namespaces/public/listed", [1, 2], None, 400, "must be a JSON object"),
    ("GET", "/admin/v2/no-such-resource", None, None, 404, "no such path GET /admin/v2/no-such-resource"),
    ("GET", "/lookup/v2/topic/persistent/public/default/a/b", None, None, 404, "no such path"),
    ("DELETE", "/admin/v2/tenants", None, None, 405, "method not allowed on DELETE /admin/v2/tenants"),
])
def test_bad_requests_get_specific_errors(standalone, method, path, body, raw, status, reason):
    got_status, got = call(standalone, method, path, body, raw)
    assert got_status == status and reason in got["reason"]


def test_partitioned_topics_grow_and_never_shrink(standalone, topic):
    path = "/admin/v2/" + topic.replace("://", "/") + "/partitions"
    assert call(standalone, "POST", path, 3)[0] == 404  # not a partitioned topic yet
    assert call(standalone, "PUT", path, 2)[0] == 204
    assert call(standalone, "POST", path, 4)[0] == 204
    assert call(standalone, "GET", path)[1] == {"partitions": 4}
    status, body = call(standalone, "POST", path, 3)
    assert status == 405 and "can only grow" in body["reason"]
    empty = call(standalone, "GET", "/admin/v2/" + topic.replace("://", "/") + "-partition-3/lastMessageId")
    assert empty[0] == 404  # a partition nobody has written to does not exist yet


def test_topics_stats_subscriptions_and_lookup(standalone, client, topic):
    name = topic.split("://", 1)[1]
    assert call(standalone, "PUT", f"/admin/v2/persistent/{name}")[0] == 204
    assert call(standalone, "PUT", f"/admin/v2/persistent/{name}")[0] == 409
    assert topic in call(standalone, "GET", "/admin/v2/persistent/public/default")[1]
    assert call(standalone, "PUT", f"/admin/v2/persistent/{name}/subscription/audit")[0] == 204
    producer = client.create_producer(topic)
    ids = [producer.send(f"{i}".encode()) for i in range(5)]
    stats = call(standalone, "GET", f"/admin/v2/persistent/{name}/stats")[1]
    assert stats["msgInCounter"] == 5 and stats["subscriptions"]["audit"]["msgBacklog"] == 5
    last = call(standalone, "GET", f"/admin/v2/persistent/{name}/lastMessageId")[1]
    assert (last["ledgerId"], last["entryId"], last["batchIndex"]) == (ids[4].ledger_id(), ids[4].entry_id(), -1)
    internal = call(standalone, "GET", f"/admin/v2/persistent/{name}/internalStats")[1]
    assert internal["numberOfEntries"] == 5 and "audit" in internal["cursors"] and internal["ledgers"]
    status, _ = call(standalone, "POST", f"/admin/v2/persistent/{name}/subscription/audit/resetcursor",
                     {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id()})
    assert status == 204
    assert call(standalone, "GET", f"/admin/v2/persistent/{name}/stats")[1]["subscriptions"]["audit"]["msgBacklog"] == 2
    consumer = client.subscribe(topic, "audit")
    assert payloads(receive_n(consumer, 2)) == [b"3", b"4"]
    consumer.close()
    assert call(standalone, "DELETE", f"/admin/v2/persistent/{name}/subscription/audit")[0] == 204
    assert "audit" not in call(standalone, "GET", f"/admin/v2/persistent/{name}/subscriptions")[1]
    lookup = call(standalone, "GET", f"/lookup/v2/topic/persistent/{name}")[1]
    assert lookup["brokerUrl"] == standalone.service_url
    assert call(standalone, "DELETE", f"/admin/v2/persistent/{name}")[0] == 405  # a producer is connected


def test_metrics_and_health(standalone, client, topic):
    producer = client.create_producer(topic)
    client.subscribe(topic, "m")
    producer.send(b"x")
    status, text = call(standalone, "GET", "/metrics")
    text = text.decode()
    assert status == 200
    for family in ("pulsar_rate_in", "pulsar_storage_size", "pulsar_msg_backlog", "pulsar_subscription_back_log",
                   "pulsar_in_messages_total", "pulsar_active_connections", "pulsar_producers_count"):
        assert family in text, family
    assert f'topic="{topic}"' in text
    assert call(standalone, "GET", "/health")[0] == 200
