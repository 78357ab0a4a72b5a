"""Authorization end to end: a `broker start` process on real ZooKeeper and bookies, with authorization on and the
anonymous role ``anon`` (what an unauthenticated client acts as), driven by the official client, ``magnetar`` and
the admin REST.

Grants and revocations are written to ZooKeeper by the test through ``Resources`` (the code the permission routes
run), from its own metadata session: exactly what a permission change on another broker of the cluster looks like
to this one, which hears of it through its watches. The permission routes themselves are exercised over REST by
``anon`` as the admin of its own tenant.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

import magnetar
from broker.ownership.resources import Resources, TenantInfo
from broker.topics.names import parse_namespace, parse_topic
from storage.metadata import open_store
from storage.testing.processes import BookieCluster, BrokerProcess
from storage.testing.waiting import wait_until

SECURED = {
    "MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
    "MAGNETAR_BROKER_ANONYMOUS_USER_ROLE": "anon",
    "MAGNETAR_BROKER_SUPER_USER_ROLES": "root,ops",
}
REVOCATION_S = 5.0  # the bound on a revocation reaching live clients


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("authz")
    url = zookeeper_server.url(f"/authz-{uuid.uuid4().hex[:12]}")
    bookies = BookieCluster(url, root / "bookies").start()
    broker = BrokerProcess(root / "broker", metadata_url=url, env=dict(SECURED))
    try:
        broker.start(timeout_s=60)
        yield broker, url
    finally:
        broker.stop()
        bookies.stop()


@pytest.fixture
def broker(cluster):
    return cluster[0]


@pytest.fixture
def admin(cluster):
    """admin(lambda resources: coroutine) runs it against the cluster's metadata from a session of its own."""
    url = cluster[1]

    def run(operation):
        async def go():
            store = await open_store(url)
            try:
                return await operation(Resources(store))
            finally:
                await store.close()

        return asyncio.run(go())

    return run


@pytest.fixture
def namespace(admin) -> str:
    """A fresh tenant (no admin roles) with one namespace, and no grants."""
    tenant = f"t{uuid.uuid4().hex[:8]}"

    async def create(resources):
        await resources.create_tenant(tenant, TenantInfo([], ["standalone"]))
        await resources.create_namespace(parse_namespace(f"{tenant}/ns"))

    admin(create)
    return f"{tenant}/ns"


def grant(admin, namespace: str, role: str, actions: list[str] | None, topic: str | None = None) -> None:
    """Set (or with None remove) ``role``'s actions on the namespace, or on one topic of it."""
    def change(auth):
        grants = auth["destination_auth"].setdefault(topic, {}) if topic else auth["namespace_auth"]
        if actions is None:
            grants.pop(role, None)
        else:
            grants[role] = actions
        return auth

    admin(lambda resources: resources.update_auth_policies(parse_namespace(namespace), change))


def topic_exists(admin, topic: str) -> bool:
    name = parse_topic(topic)
    return admin(lambda r: r.store.exists(f"/managed-ledgers/{name.managed_ledger_name}")) is not None


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


def _eventually(action, what: str, timeout_s: float = REVOCATION_S):
    """``action()``'s result once it stops raising AuthorizationError (a grant reaches the broker by its watch)."""
    def attempt():
        try:
            return action() or True
        except pulsar.AuthorizationError:
            return None

    return wait_until(attempt, timeout_s, what)


# ---- the binary protocol ---------------------------------------------------------------------------------


def test_anonymous_role_is_refused_until_granted_and_a_refusal_creates_nothing(broker, client, admin, namespace):
    topic = f"persistent://{namespace}/orders"
    with pytest.raises(pulsar.AuthorizationError):
        client.create_producer(topic)
    with pytest.raises(pulsar.AuthorizationError):
        client.subscribe(topic, "s")
    assert not topic_exists(admin, topic)  # nothing was auto-created for a refused role

    grant(admin, namespace, "anon", ["produce", "consume"])
    producer = _eventually(lambda: client.create_producer(topic), "the grant to let anon produce")
    consumer = client.subscribe(topic, "s")
    producer.send(b"granted")
    assert consumer.receive(timeout_millis=10_000).data() == b"granted"


def test_each_command_needs_its_own_action(broker, client, admin, namespace):
    consume_only, produce_only = f"persistent://{namespace}/c", f"persistent://{namespace}/p"
    grant(admin, namespace, "anon", ["consume"], topic=consume_only)
    grant(admin, namespace, "anon", ["produce"], topic=produce_only)
    # consume alone passes the lookup (PARTITIONED_METADATA, LOOKUP) but not PRODUCER, and the other way round
    _eventually(lambda: client.subscribe(consume_only, "s"), "the consume grant")
    with pytest.raises(pulsar.AuthorizationError):
        client.create_producer(consume_only)
    producer = _eventually(lambda: client.create_producer(produce_only), "the produce grant")
    with pytest.raises(pulsar.AuthorizationError):
        client.subscribe(produce_only, "s")
    producer.send(b"still fine")
    # a topic grant is for that topic only
    with pytest.raises(pulsar.AuthorizationError):
        client.create_producer(f"persistent://{namespace}/elsewhere")


def test_tenant_admin_produces_and_consumes_in_its_tenant(broker, client, admin):
    tenant = f"adm{uuid.uuid4().hex[:8]}"

    async def create(resources):
        await resources.create_tenant(tenant, TenantInfo(["anon"], ["standalone"]))
        await resources.create_namespace(parse_namespace(f"{tenant}/ns"))

    admin(create)
    topic = f"persistent://{tenant}/ns/admin-owned"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "s")
    producer.send(b"mine")
    assert consumer.receive(timeout_millis=10_000).data() == b"mine"


def test_listing_a_namespace_needs_a_namespace_grant(broker, client, admin, namespace):
    pattern = re.compile(f"persistent://{namespace}/.*")
    grant(admin, namespace, "anon", ["consume"], topic=f"persistent://{namespace}/one")  # a topic grant is not enough
    # The broker answers AuthorizationError; pulsar-client 3.13 reports any failure of GET_TOPICS_OF_NAMESPACE as
    # LookupError, so the code itself is checked with magnetar below.
    with pytest.raises((pulsar.AuthorizationError, pulsar.LookupError)):
        client.subscribe(pattern, "pattern-sub")
    c = magnetar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        with pytest.raises(magnetar.AuthorizationError, match=f"'anon' is not allowed to list the topics of namespace "
                                                              f"{namespace}"):
            c.subscribe(pattern, "pattern-sub")
    finally:
        c.close()
    grant(admin, namespace, "anon", ["consume"])
    _eventually(lambda: client.subscribe(pattern, "pattern-sub"), "the namespace grant to allow listing")


def test_magnetar_hears_the_reason(broker, admin, namespace):
    topic = f"persistent://{namespace}/why"
    c = magnetar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        with pytest.raises(magnetar.AuthorizationError, match=f"'anon' is not allowed to look up topic {topic}"):
            c.create_producer(topic)
        grant(admin, namespace, "anon", ["consume"])
        wait_until(lambda: _magnetar_subscribes(c, topic), REVOCATION_S, "the grant to reach the broker")
        with pytest.raises(magnetar.AuthorizationError, match=f"'anon' is not allowed to produce on topic {topic}"):
            c.create_producer(topic)
    finally:
        c.close()


def _magnetar_subscribes(c, topic) -> bool:
    try:
        c.subscribe(topic, "s")
        return True
    except magnetar.AuthorizationError:
        return False


def test_a_revocation_closes_live_clients_within_5s_and_harms_no_one_else(broker, client, admin, namespace):
    topic = f"persistent://{namespace}/live"
    grant(admin, namespace, "anon", ["produce", "consume"])
    producer = _eventually(lambda: client.create_producer(topic, send_timeout_millis=3000), "the grant")
    consumer = client.subscribe(topic, "s")
    producer.send(b"before")
    assert consumer.receive(timeout_millis=10_000).data() == b"before"
    # a bystander: the same role on another tenant's namespace, which keeps its grant
    other_ns = f"o{uuid.uuid4().hex[:8]}/ns"
    admin(lambda r: _tenant_and_namespace(r, other_ns))
    grant(admin, other_ns, "anon", ["produce", "consume"])
    bystander_topic = f"persistent://{other_ns}/bystander"
    bystander = _eventually(lambda: client.create_producer(bystander_topic), "the bystander's grant")
    bystander_consumer = client.subscribe(bystander_topic, "s")

    revoked_at = time.monotonic()
    grant(admin, namespace, "anon", None)
    wait_until(lambda: not producer.is_connected() and not consumer.is_connected(), REVOCATION_S,
               lambda: f"the broker to close the revoked role's producer (connected: {producer.is_connected()}) and "
                       f"consumer (connected: {consumer.is_connected()})")
    took = time.monotonic() - revoked_at
    assert took < REVOCATION_S
    with pytest.raises(pulsar.AuthorizationError):
        client.subscribe(topic, "s2")
    with pytest.raises(Exception):
        producer.send(b"after")  # its reconnection is refused: the send times out, nothing is stored
    bystander.send(b"unharmed")
    assert bystander_consumer.receive(timeout_millis=10_000).data() == b"unharmed"
    assert bystander.is_connected() and bystander_consumer.is_connected()


def test_a_revocation_reaches_magnetar_clients(broker, client, admin, namespace):
    """The same with ``magnetar``: its consumer hears CLOSE_CONSUMER and may not resubscribe, so it gets nothing
    sent after the revocation; its producer's reconnection is refused, so its sends fail."""
    topic = f"persistent://{namespace}/m-live"
    grant(admin, namespace, "anon", ["produce"])
    grant(admin, namespace, "anon", ["consume"], topic=topic)
    c = magnetar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        wait_until(lambda: _magnetar_subscribes(c, topic), REVOCATION_S, "the grants")
        consumer = c.subscribe(topic, "m")  # subscribed before the sentinel: the re-check closes it first
        sentinel = client.subscribe(topic, "sentinel")
        producer = c.create_producer(topic, send_timeout_millis=2000)
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"

        grant(admin, namespace, "anon", None, topic=topic)  # consume revoked, produce kept
        wait_until(lambda: not sentinel.is_connected(), REVOCATION_S, "the broker to close the consumers")
        producer.send(b"after")  # still allowed to produce
        with pytest.raises(magnetar.Timeout):
            consumer.receive(timeout_millis=1500)
        with pytest.raises(magnetar.AuthorizationError, match="'anon' is not allowed to consume from topic"):
            c.subscribe(topic, "m2")

        grant(admin, namespace, "anon", None)  # produce revoked too
        wait_until(lambda: _send_fails(producer), REVOCATION_S + 5, "the producer's sends to fail")
    finally:
        c.close()


def _send_fails(producer) -> bool:
    try:
        producer.send(b"probe")
        return False
    except magnetar.MagnetarError:
        return True


async def _tenant_and_namespace(resources, ns: str):
    tenant = ns.split("/")[0]
    await resources.create_tenant(tenant, TenantInfo([], ["standalone"]))
    await resources.create_namespace(parse_namespace(ns))


# ---- the admin REST --------------------------------------------------------------------------------------


def http(broker, method: str, path: str, body=None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.web_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else None


def test_admin_rest_refuses_a_role_without_the_permission(broker, admin, namespace):
    tenant = namespace.split("/")[0]
    refused = [
        ("PUT", "/admin/v2/tenants/newtenant", {"adminRoles": ["anon"]}),
        ("POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["anon"]}),
        ("GET", "/admin/v2/tenants", None),
        ("DELETE", f"/admin/v2/tenants/{tenant}", None),
        ("GET", f"/admin/v2/namespaces/{tenant}", None),
        ("PUT", f"/admin/v2/namespaces/{tenant}/another", {}),
        ("GET", f"/admin/v2/namespaces/{namespace}/permissions", None),
        ("POST", f"/admin/v2/namespaces/{namespace}/permissions/anon", ["produce"]),
        ("PUT", f"/admin/v2/persistent/{namespace}/t1", None),
        ("GET", f"/admin/v2/persistent/{namespace}/t1/stats", None),
        ("POST", f"/admin/v2/persistent/{namespace}/t1/permissions/anon", ["consume"]),
        ("GET", f"/lookup/v2/topic/persistent/{namespace}/t1", None),
        ("GET", "/admin/v2/broker-stats/load-report", None),
        ("GET", f"/admin/v2/persistent/{namespace}/t1/partitioned-internalStats", None),
        ("DELETE", f"/admin/v2/persistent/{namespace}/t1/partitions", None),
        ("PUT", f"/admin/v2/namespaces/{namespace}/unload", None),
        ("POST", f"/admin/v2/namespaces/{namespace}/clearBacklog", None),
        ("GET", f"/admin/v2/non-persistent/{namespace}/np/subscriptions", None),
        ("DELETE", f"/admin/v2/non-persistent/{namespace}/np/subscription/s", None),
        ("DELETE", f"/admin/v2/non-persistent/{namespace}/np", None),
        ("PUT", f"/admin/v2/non-persistent/{namespace}/np/unload", None),
        ("POST", f"/admin/v2/non-persistent/{namespace}/np/maxProducers", 1),
        ("POST", f"/admin/v2/non-persistent/{namespace}/np/publishRate", {"publishThrottlingRateInMsg": 1}),
    ]
    for method, path, body in refused:
        status, answer = http(broker, method, path, body)
        assert status == 403, f"{method} {path} answered {status} {answer}"
        assert "'anon'" in answer["reason"], answer
    # refused requests changed nothing
    assert admin(lambda r: r.store.exists("/admin/policies/newtenant")) is None
    assert admin(lambda r: r.get_tenant(tenant)).admin_roles == []
    assert admin(lambda r: r.namespace_exists(parse_namespace(f"{tenant}/another"))) is False
    assert admin(lambda r: r.get_policies(parse_namespace(namespace))).auth_policies is None
    assert not topic_exists(admin, f"persistent://{namespace}/t1")
    # open routes stay open
    assert urllib.request.urlopen(f"{broker.web_url}/health", timeout=10).status == 200
    assert urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=10).status == 200


def test_lookup_over_http_needs_a_grant(broker, admin, namespace):
    grant(admin, namespace, "anon", ["produce"])
    wait_until(lambda: http(broker, "GET", f"/lookup/v2/topic/persistent/{namespace}/t1")[0] == 200, REVOCATION_S,
               "the grant to allow the lookup")


@pytest.fixture
def own_tenant(broker, admin) -> str:
    """A tenant whose admin is ``anon``, with namespace ``ns``: anon may manage its permissions over REST."""
    tenant = f"own{uuid.uuid4().hex[:8]}"

    async def create(resources):
        await resources.create_tenant(tenant, TenantInfo(["anon"], ["standalone"]))
        await resources.create_namespace(parse_namespace(f"{tenant}/ns"))

    admin(create)
    return tenant


def test_namespace_permission_routes(broker, own_tenant):
    base = f"/admin/v2/namespaces/{own_tenant}/ns/permissions"
    assert http(broker, "GET", base) == (200, {})
    assert http(broker, "POST", f"{base}/app", ["produce", "consume"])[0] == 204
    assert http(broker, "POST", f"{base}/reader", ["consume"])[0] == 204
    assert http(broker, "GET", base) == (200, {"app": ["consume", "produce"], "reader": ["consume"]})
    assert http(broker, "POST", f"{base}/app", ["produce"])[0] == 204  # a grant replaces the role's actions
    assert http(broker, "DELETE", f"{base}/reader")[0] == 204
    assert http(broker, "GET", base) == (200, {"app": ["produce"]})
    status, answer = http(broker, "POST", f"{base}/app", ["produce", "fly"])
    assert status == 400 and "fly" in answer["reason"]
    status, answer = http(broker, "POST", f"{base}/app", "produce")
    assert status == 400 and "JSON array" in answer["reason"]
    assert http(broker, "GET", base) == (200, {"app": ["produce"]})  # refused changes change nothing
    policies = http(broker, "GET", f"/admin/v2/namespaces/{own_tenant}/ns")[1]
    assert policies["auth_policies"]["namespace_auth"] == {"app": ["produce"]}
    assert http(broker, "GET", f"/admin/v2/namespaces/{own_tenant}/missing/permissions")[0] == 404


def test_topic_permission_routes(broker, own_tenant):
    topic = f"/admin/v2/persistent/{own_tenant}/ns/orders/permissions"
    assert http(broker, "POST", f"/admin/v2/namespaces/{own_tenant}/ns/permissions/app", ["produce"])[0] == 204
    assert http(broker, "POST", f"{topic}/app", ["consume"])[0] == 204
    assert http(broker, "POST", f"{topic}/audit", ["consume"])[0] == 204
    # the topic's permissions are the namespace's merged with its own, as in Pulsar
    assert http(broker, "GET", topic) == (200, {"app": ["consume", "produce"], "audit": ["consume"]})
    assert http(broker, "GET", f"/admin/v2/persistent/{own_tenant}/ns/other/permissions") == (200, {"app": ["produce"]})
    assert http(broker, "DELETE", f"{topic}/audit")[0] == 204
    assert http(broker, "DELETE", f"{topic}/audit")[0] == 404  # nothing of its own left to revoke
    assert http(broker, "POST", f"{topic}/app", ["steal"])[0] == 400
    assert http(broker, "GET", topic) == (200, {"app": ["consume", "produce"]})


def test_namespace_creation_accepts_pulsars_auth_policies(broker, own_tenant):
    body = {"auth_policies": {"namespace_auth": {"app": ["produce"], "ops": ["consume", "produce"]}}}
    assert http(broker, "PUT", f"/admin/v2/namespaces/{own_tenant}/made", body)[0] == 204
    assert http(broker, "GET", f"/admin/v2/namespaces/{own_tenant}/made/permissions") == (
        200, {"app": ["produce"], "ops": ["consume", "produce"]})
    bad = {"auth_policies": {"namespace_auth": {"app": ["everything"]}}}
    assert http(broker, "PUT", f"/admin/v2/namespaces/{own_tenant}/bad", bad)[0] == 400
    assert http(broker, "GET", f"/admin/v2/namespaces/{own_tenant}/bad")[0] == 404
    # a tenant admin is still not a superuser
    assert http(broker, "PUT", f"/admin/v2/tenants/{own_tenant}x", {})[0] == 403
    assert http(broker, "GET", f"/admin/v2/tenants/{own_tenant}") == (
        200, {"adminRoles": ["anon"], "allowedClusters": ["standalone"]})


def test_with_authorization_off_everyone_manages_tenants_and_permissions(standalone):
    """``broker standalone`` keeps authorization off (as Pulsar standalone does): the same routes, no checks."""
    tenant = f"open{uuid.uuid4().hex[:8]}"
    assert http(standalone, "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["a"], "allowedClusters": []})[0] == 204
    assert http(standalone, "POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["b", "c"]})[0] == 204
    assert http(standalone, "GET", f"/admin/v2/tenants/{tenant}") == (200, {"adminRoles": ["b", "c"], "allowedClusters": []})
    assert http(standalone, "POST", "/admin/v2/tenants/missing", {"adminRoles": []})[0] == 404
    assert http(standalone, "POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": "b"})[0] == 400
    assert http(standalone, "PUT", f"/admin/v2/namespaces/{tenant}/ns", {})[0] == 204
    base = f"/admin/v2/namespaces/{tenant}/ns/permissions"
    assert http(standalone, "POST", f"{base}/app", ["produce", "functions"])[0] == 204
    assert http(standalone, "GET", base) == (200, {"app": ["functions", "produce"]})
    assert http(standalone, "DELETE", f"{base}/app")[0] == 204
    assert http(standalone, "GET", base) == (200, {})


def test_without_an_anonymous_role_a_client_without_credentials_is_refused_everything(start_standalone):
    """No role at all is refused before anything is read: public/default, which this broker did not create
    (authorization is on) and nobody here could, answers 403 / AuthorizationError, not "does not exist"."""
    broker = start_standalone(env={"MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
                                   "MAGNETAR_BROKER_SUPER_USER_ROLES": "root"})
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer("persistent://public/default/nobody")
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe("persistent://public/default/nobody", "s")
    finally:
        c.close()
    status, answer = http(broker, "GET", "/admin/v2/namespaces/public/default/permissions")
    assert status == 403 and "anonymous" in answer["reason"]
    assert http(broker, "GET", "/admin/v2/tenants")[0] == 403
    assert urllib.request.urlopen(f"{broker.web_url}/health", timeout=10).status == 200
