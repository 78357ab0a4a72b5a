"""Bundle split on real brokers: under production nothing surfaces and nothing acknowledged is lost; after an
unload the halves can live on different brokers; bad requests get clear 4xx answers."""

from __future__ import annotations

import urllib.error
import urllib.request

import pulsar
import pytest

import magnetar

from broker.ownership.bundles import NamespaceBundles, bundle_name
from tests.cluster.support import Production, client, lookup, owner_of, topics_in
from tests.official_client.support import admin_call, distinct_in_order, receive_n

BASE = "/admin/v2/namespaces/public/default"
DEFAULT = NamespaceBundles.equal(4)


def _bundles(broker) -> dict:
    status, doc = admin_call(broker, "GET", f"{BASE}/bundles")
    assert status == 200, doc
    return doc


def _split(broker, bundle, query: str = "") -> None:
    status, doc = admin_call(broker, "PUT", f"{BASE}/{bundle_name(bundle)}/split{query}")
    assert status == 204, doc


@pytest.mark.parametrize("api", [pulsar, magnetar], ids=["pulsar-client", "magnetar"])
def test_splitting_a_busy_bundle_surfaces_no_error_and_loses_nothing(two_brokers, api):
    parent = DEFAULT.ranges()[1]
    after, low, high = DEFAULT.split(parent)
    topics = topics_in(low, 2, f"busy-{api.__name__}", after) + topics_in(high, 2, f"busy-{api.__name__}", after)
    owner = owner_of(two_brokers, topics[0])
    other = next(b for b in two_brokers if b is not owner)
    c = client(other.service_url, api)  # entering through the broker that does not own the bundle
    try:
        consumers = [c.subscribe(t, "durable") for t in topics]
        production = Production(api, [c.create_producer(t, batching_enabled=False, send_timeout_millis=30_000)
                                      for t in topics])
        try:
            production.wait_for_more(30, 30, "sends on every topic before the split")
            _split(owner, parent)
            production.wait_for_more(30, 60, "sends on every topic after the split")
            for b in two_brokers:  # every broker reads the new boundaries
                assert _bundles(b)["boundaries"] == after.to_json()["boundaries"]
            assert {bundle_name(low), bundle_name(high)} <= set(_bundles(owner)["owned"])  # the owner kept both
            assert {lookup(other, t) for t in topics} == {owner.service_url}
            _split(owner, low, "?unload=true")  # now hand half of them off
            production.wait_for_more(30, 60, "sends on every topic after the split and unload")
        finally:
            production.stop()
        assert production.errors == []
        doc = _bundles(owner)
        assert doc["numBundles"] == 6 and bundle_name(low) not in doc["owned"] and bundle_name(high) in doc["owned"]
        for consumer, acked in zip(consumers, production.acked):
            assert distinct_in_order(consumer, len(acked)) == acked  # every acknowledged message, in order
    finally:
        c.close()


def test_after_split_and_unload_the_halves_can_be_owned_by_different_brokers(two_brokers):
    parent = DEFAULT.ranges()[2]
    after, low, high = DEFAULT.split(parent)
    (t_low,), (t_high,) = topics_in(low, 1, "halves", after), topics_in(high, 1, "halves", after)
    owner = owner_of(two_brokers, t_low)
    other = next(b for b in two_brokers if b is not owner)
    _split(owner, parent, "?unload=true")
    assert _bundles(owner)["owned"] == []
    assert lookup(owner, t_low, authoritative=True) == owner.service_url  # each broker takes one half
    assert lookup(other, t_high, authoritative=True) == other.service_url
    assert _bundles(owner)["owned"] == [bundle_name(low)] and _bundles(other)["owned"] == [bundle_name(high)]
    assert lookup(other, t_low) == owner.service_url and lookup(owner, t_high) == other.service_url
    c = client(owner.service_url)
    try:
        for t in (t_low, t_high):
            consumer = c.subscribe(t, "s")
            c.create_producer(t).send(t.encode())
            assert receive_n(consumer, 1)[0].data() == t.encode()
    finally:
        c.close()
    assert _bundles(other)["boundaries"] == after.to_json()["boundaries"]


def test_bad_split_requests_get_clear_errors(two_brokers):
    a, b = two_brokers
    first = bundle_name(DEFAULT.ranges()[0])
    for name in ("nonsense", "0x80000000_0x40000000", "0x00000000_0x1ffffffff"):
        status, doc = admin_call(a, "PUT", f"{BASE}/{name}/split")
        assert status == 412 and "invalid bundle" in doc["reason"], (name, doc)
    status, doc = admin_call(a, "PUT", f"{BASE}/0x00000000_0x20000000/split")
    assert status == 404 and "not a bundle of public/default" in doc["reason"]
    status, doc = admin_call(a, "PUT", f"/admin/v2/namespaces/public/nope/{first}/split")
    assert status == 404 and "public/nope does not exist" in doc["reason"]
    assert admin_call(a, "GET", "/admin/v2/namespaces/public/nope/bundles")[0] == 404
    status, doc = admin_call(a, "PUT", f"{BASE}/{first}/split")
    assert status == 409 and "not owned by any broker" in doc["reason"]
    status, doc = admin_call(a, "PUT", f"{BASE}/{first}/split?splitAlgorithmName=topic_count_equally_divide")
    assert status == 412 and "unsupported split algorithm" in doc["reason"]
    # Owned by b: a answers with a redirect to b (Pulsar's 307), and b splits it.
    assert lookup(b, topics_in(DEFAULT.ranges()[0], 1, "redirected")[0], authoritative=True) == b.service_url
    with pytest.raises(urllib.error.HTTPError) as redirect:
        urllib.request.urlopen(urllib.request.Request(f"{a.web_url}{BASE}/{first}/split", method="PUT"), timeout=15)
    assert redirect.value.code == 307 and redirect.value.headers["Location"] == f"{b.web_url}{BASE}/{first}/split"
    _split(b, DEFAULT.ranges()[0])
    assert _bundles(a)["numBundles"] == 5
    status, doc = admin_call(b, "PUT", f"{BASE}/{first}/split")  # split already: not a bundle any more
    assert status == 404
