"""Admin operations and discovery across brokers: a partitioned topic whose partitions live on different brokers
(the broker asked does its own partitions and asks the owners of the others: terminate, partitioned-stats), and
the non-persistent topics each broker serves (listed by every broker, found by a regex consumer connected to
another, their stats answered through any broker)."""

from __future__ import annotations

import contextlib
import re

import pulsar
import pytest

from broker.ownership.bundles import NamespaceBundles
from broker.topics.names import parse_topic
from storage.testing.waiting import wait_until
from tests.admin_cli.support import Admin
from tests.cluster.support import client as _client, one_in_each_of_two_bundles, owner_of, take
from tests.official_client.support import admin_call as call

PARTITIONS = 6


def test_terminate_partitions_reaches_partitions_other_brokers_own(two_brokers):
    base = "persistent://public/default/spread"
    assert call(two_brokers[0], "PUT", "/admin/v2/persistent/public/default/spread/partitions", PARTITIONS)[0] == 204
    owners = {i: owner_of(two_brokers, f"{base}-partition-{i}") for i in range(PARTITIONS)}
    asked = two_brokers[0] if any(o is not two_brokers[0] for o in owners.values()) else two_brokers[1]
    remote = [i for i, o in owners.items() if o is not asked]
    assert remote, "at least one partition is another broker's"
    clients = {id(b): _client(b.service_url) for b in two_brokers}
    try:
        for i, owner in owners.items():  # one message on each partition, through its owner
            clients[id(owner)].create_producer(f"{base}-partition-{i}").send(b"m")
        status, answer = call(asked, "POST", "/admin/v2/persistent/public/default/spread/terminate/partitions")
        assert status == 200 and sorted(map(int, answer)) == list(range(PARTITIONS)), answer
        assert all(answer[str(i)]["entryId"] == 0 and answer[str(i)]["partitionIndex"] == i for i in range(PARTITIONS))
        for i, owner in owners.items():
            with pytest.raises(pulsar.TopicTerminated):
                clients[id(owner)].create_producer(f"{base}-partition-{i}")
        print(f"{len(remote)} of {PARTITIONS} partitions terminated through their owner")
    finally:
        for c in clients.values():
            c.close()


# ---- discovery of non-persistent topics other brokers serve ------------------------------------------------------


def _spread_partitions(two_brokers, base: str) -> dict[int, object]:
    """Make each broker own a bundle holding one of ``base``'s partitions; every partition's owner by index."""
    names = [f"{base}-partition-{i}" for i in range(PARTITIONS)]
    taken = [take(b, n, two_brokers) for b, n in zip(two_brokers, one_in_each_of_two_bundles(names))]
    assert taken == list(two_brokers), "each broker serves one of two partitions"
    return {i: owner_of(two_brokers, n) for i, n in enumerate(names)}


@contextlib.contextmanager
def _spread_topic(two_brokers, ns: str, domain: str = "persistent"):
    """A partitioned topic ``<domain>://<ns>/spread`` in a new namespace, partitions served by both brokers:
    (its name, each partition's owner by index, a client per broker by ``id(broker)``)."""
    assert call(two_brokers[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    base = f"{domain}://{ns}/spread"
    assert call(two_brokers[0], "PUT", f"/admin/v2/{domain}/{ns}/spread/partitions", PARTITIONS)[0] == 204
    owners = _spread_partitions(two_brokers, base)
    clients = {id(b): _client(b.service_url) for b in two_brokers}
    try:
        yield base, owners, clients
    finally:
        for c in clients.values():
            c.close()


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_partitioned_stats_gather_partitions_other_brokers_serve(two_brokers, domain):
    """Through either broker, REST and magnetar-admin: every partition's counters, its own broker's figures."""
    with _spread_topic(two_brokers, f"public/pstats-{domain}", domain) as (base, owners, clients):
        for i, owner in owners.items():  # a subscription and i + 1 messages on partition i, through its owner
            clients[id(owner)].subscribe(f"{base}-partition-{i}", "s")
            producer = clients[id(owner)].create_producer(f"{base}-partition-{i}")
            for _ in range(i + 1):
                producer.send(b"m")
        total = sum(range(1, PARTITIONS + 1))
        for asked in two_brokers:
            status, stats = call(asked, "GET", f"/admin/v2/{base.replace('://', '/')}/partitioned-stats")
            assert status == 200 and stats["metadata"] == {"partitions": PARTITIONS}, stats
            assert stats["msgInCounter"] == total
            assert {n: (p["msgInCounter"], list(p["subscriptions"])) for n, p in stats["partitions"].items()} == {
                f"{base}-partition-{i}": (i + 1, ["s"]) for i in range(PARTITIONS)}
            cli = Admin(asked.web_url)("topics", "partitioned-stats", base).json()
            assert cli["msgInCounter"] == total and cli["partitions"] == {}  # pulsar-admin's default: no per partition
            if domain == "persistent":
                internal = Admin(asked.web_url)("topics", "partitioned-stats-internal", base).json()
                assert {n: p["entriesAddedCounter"] for n, p in internal["partitions"].items()} == {
                    f"{base}-partition-{i}": i + 1 for i in range(PARTITIONS)}


def test_non_persistent_topics_of_every_broker_are_listed_and_found_by_a_regex_consumer(two_brokers):
    ns = "public/np-discovery"
    assert call(two_brokers[0], "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    bundles = NamespaceBundles.equal(4)  # the default
    topics = []
    for wanted in bundles.ranges()[:2]:  # one topic in each of two bundles; one bundle for each broker
        topics.append(next(f"non-persistent://{ns}/np-{i}" for i in range(10_000)
                           if bundles.bundle_of(parse_topic(f"non-persistent://{ns}/np-{i}")) == wanted))
    owners = [take(broker, topic, two_brokers) for broker, topic in zip(two_brokers, topics)]
    assert owners == list(two_brokers), "each broker serves one of the two topics"
    clients = [_client(b.service_url) for b in two_brokers]
    try:
        holders = [c.subscribe(t, "hold") for c, t in zip(clients, topics)]  # a topic exists while it is used
        for broker in two_brokers:  # the admin list on either broker names both, and either answers their stats
            status, listed = call(broker, "GET", f"/admin/v2/non-persistent/{ns}")
            assert status == 200 and set(listed) == set(topics), listed
            for topic in topics:
                status, stats = call(broker, "GET", f"/admin/v2/non-persistent/{topic.split('://', 1)[1]}/stats")
                assert status == 200 and list(stats["subscriptions"]) == ["hold"], stats
        admin = Admin(two_brokers[0].web_url)  # pulsar-admin's topics list: both domains unless one is named
        assert set(admin("topics", "list", ns).lines()) == set(topics)
        assert admin("topics", "list", ns, "-td", "persistent").lines() == []
        assert set(admin("topics", "stats", topics[1]).json()["subscriptions"]) == {"hold"}
        # GET_TOPICS_OF_NAMESPACE through broker 0 finds the topic broker 1 serves: the regex consumer gets both.
        rx = clients[0].subscribe(re.compile(f"{ns}/np-.*"), "rx", consumer_type=pulsar.ConsumerType.Shared,
                                  regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly)
        producers = [c.create_producer(t) for c, t in zip(clients, topics)]
        got: set = set()

        def both_arrive() -> bool:
            for p in producers:  # non-persistent: what is sent before the regex consumer subscribed is gone
                p.send(b"hello")
            try:
                while True:
                    got.add(rx.receive(timeout_millis=200).topic_name())
            except pulsar.Timeout:
                return got == set(topics)

        wait_until(both_arrive, 30, lambda: f"messages of both topics on the regex consumer; have {got}")
        for h in holders:
            h.close()
    finally:
        for c in clients:
            c.close()


def _loaded_here(broker, ns: str) -> set[str]:
    """The topics of ``ns`` loaded on ``broker`` (its console lists them without loading any)."""
    status, page = call(broker, "GET", f"/admin/magnetar/v1/namespaces/{ns}/topics?limit=500")
    assert status == 200, page
    return {row["name"] for row in page["topics"] if row["loaded"]}


def test_subscription_operations_compaction_unload_and_delete_of_a_partitioned_topic_reach_every_partition(
        two_brokers):
    """pulsar-admin's subscription commands on a partitioned topic act on each partition, through either broker."""
    ns = "public/psubs"
    admin = Admin(two_brokers[0].web_url)
    with _spread_topic(two_brokers, ns) as (base, owners, clients):
        def backlog() -> int:
            return admin("topics", "partitioned-stats", base).json()["msgBacklog"]

        admin("topics", "create-subscription", base, "-s", "audit").ok()
        admin("topics", "create-subscription", base, "-s", "billing").ok()
        assert admin("topics", "subscriptions", base).lines() == ["audit", "billing"]
        for i, owner in owners.items():  # two messages on each partition, through its owner
            producer = clients[id(owner)].create_producer(f"{base}-partition-{i}")
            for _ in range(2):
                producer.send(b"m", partition_key=f"k{i}")
            producer.close()
        assert backlog() == 2 * 2 * PARTITIONS  # two subscriptions

        admin("topics", "clear-backlog", base, "-s", "audit").ok()
        assert backlog() == 2 * PARTITIONS
        admin("topics", "reset-cursor", base, "-s", "audit", "-t", "1h").ok()
        assert backlog() == 2 * 2 * PARTITIONS
        admin("topics", "expire-messages", base, "-s", "audit", "-t", "0").ok()
        assert backlog() == 2 * PARTITIONS
        admin("topics", "expire-messages-all-subscriptions", base, "-t", "0").ok()
        assert backlog() == 0
        for args in (("peek-messages", base, "-s", "audit"), ("skip", base, "-s", "audit", "-n", "1"),
                     ("reset-cursor", base, "-s", "audit", "-m", "1:0")):
            refused = admin("topics", *args)
            assert refused.returncode == 1 and "HTTP 405" in refused.stderr, refused

        admin("topics", "compact", base).ok()
        assert admin("topics", "compaction-status", base, "-w").lines() == ["Compaction was a success"]

        partitions = {f"{base}-partition-{i}" for i in range(PARTITIONS)}
        assert set().union(*(_loaded_here(b, ns) for b in two_brokers)) == partitions
        admin("topics", "unload", base).ok()
        assert set().union(*(_loaded_here(b, ns) for b in two_brokers)) == set()

        admin("topics", "unsubscribe", base, "-s", "billing").ok()
        assert admin("topics", "subscriptions", base).lines() == ["audit"]
        missing = admin("topics", "unsubscribe", base, "-s", "billing")
        assert missing.returncode == 1 and "HTTP 404" in missing.stderr

        holder = clients[id(owners[0])].subscribe(f"{base}-partition-0", "audit")
        busy = admin("topics", "delete-partitioned-topic", base)
        assert busy.returncode == 1 and "HTTP 405" in busy.stderr  # a consumer is connected: still on record
        assert admin("topics", "get-partitioned-topic-metadata", base).json() == {"partitions": PARTITIONS}
        # (Not forced with the consumer connected: its client would come back at once and, as in Pulsar, load the
        # partition again.)
        holder.close()
        admin("topics", "delete-partitioned-topic", base).ok()
        assert admin("topics", "get-partitioned-topic-metadata", base).json() == {"partitions": 0}
        assert admin("topics", "list", ns).lines() == []  # every partition's ledgers gone, on both brokers
