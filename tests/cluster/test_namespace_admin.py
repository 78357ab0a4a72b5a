"""Namespace-wide admin operations on two brokers: each bundle is acted on by the broker that owns it, whichever
broker was asked (Pulsar's broker asks each bundle's owner). Before, the broker asked did only its own bundles, so
behind ``broker standalone``'s workers a clear-backlog or an unload silently missed the others'."""

from __future__ import annotations

from tests.admin_cli.support import Admin
from tests.cluster.support import client as _client, one_in_each_of_two_bundles, take
from tests.official_client.support import admin_call as call


def _backlog(broker, topic: str, sub: str) -> int:
    status, stats = call(broker, "GET", f"/admin/v2/persistent/{topic.split('://', 1)[1]}/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


def test_clear_backlog_and_unload_reach_the_bundles_another_broker_owns(two_brokers):
    ns = "public/ns-wide"
    assert call(two_brokers[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    topics = one_in_each_of_two_bundles([f"persistent://{ns}/t-{i}" for i in range(100)])
    assert [take(b, t, two_brokers) for b, t in zip(two_brokers, topics)] == list(two_brokers)
    clients = [_client(b.service_url) for b in two_brokers]
    try:
        for c, topic in zip(clients, topics):  # subscriptions "a" and "b", 3 messages behind each
            for sub in ("a", "b"):
                c.subscribe(topic, sub).close()
            producer = c.create_producer(topic)
            for _ in range(3):
                producer.send(b"m")
            producer.close()
        admin = Admin(two_brokers[0].web_url)

        admin("namespaces", "clear-backlog", ns, "-s", "a", "--force").ok()
        assert [(_backlog(b, t, "a"), _backlog(b, t, "b")) for b, t in zip(two_brokers, topics)] == [(0, 3), (0, 3)]
        status, _ = call(two_brokers[0], "POST", f"/admin/v2/namespaces/{ns}/clearBacklog")
        assert status == 204
        assert [_backlog(b, t, "b") for b, t in zip(two_brokers, topics)] == [0, 0]

        admin("namespaces", "unload", ns).ok()
        for broker in two_brokers:  # neither owns a bundle of the namespace any more
            assert call(broker, "GET", f"/admin/v2/namespaces/{ns}/bundles")[1]["owned"] == [], broker.name
        clients[1].create_producer(topics[1]).send(b"after")  # looked up again, placed afresh
    finally:
        for c in clients:
            c.close()
