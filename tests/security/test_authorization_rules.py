"""Authorization rules from tables (pure), every admin route's declaration, and the grants cache with its watches and
re-checks of live clients (in-process, on the embedded metadata store)."""

from __future__ import annotations

import types
import uuid

import pytest

from broker.config import BrokerConfig
from broker.errors import AuthorizationError, TopicNotFoundError
from broker.http import build_app
from broker.ownership.resources import (
    AUTH_ACTIONS, InvalidPoliciesError, NamespacePolicies, Resources, TenantInfo, normalize_auth_policies, parse_actions,
)
from broker.security import authorization as authorization_module
from broker.security.authorization import (
    HTTP_ROLE_KEY, AuthorizationService, Grants, Need, allows, effective_role, refusal, request_role,
)
from broker.subscriptions.consumer import Consumer
from broker.topics.names import parse_namespace, parse_topic
from broker.topics.producer import Producer
from storage.metadata import open_store
from storage.testing.waiting import wait_until_async

SUPERS = ("root",)
G = Grants(
    admin_roles=frozenset({"boss"}),
    namespace_actions={"writer": {"produce"}, "reader": {"consume"}, "both": {"produce", "consume"},
                       "worker": {"functions", "packages"}},
    topic_actions={"t-writer": {"produce"}, "t-reader": {"consume"}},
)


@pytest.mark.parametrize("role, need, grants, expected", [
    # superusers may do everything, even where nothing is stored
    ("root", Need.SUPERUSER, Grants(), True),
    ("root", Need.PRODUCE, Grants(), True),
    ("root", Need.TENANT_ADMIN, Grants(), True),
    # tenant admins administer, produce, consume and look up, but are not superusers
    ("boss", Need.TENANT_ADMIN, G, True),
    ("boss", Need.PRODUCE, G, True),
    ("boss", Need.CONSUME, G, True),
    ("boss", Need.NAMESPACE_LOOKUP, G, True),
    ("boss", Need.SUPERUSER, G, False),
    # namespace grants
    ("writer", Need.PRODUCE, G, True),
    ("writer", Need.CONSUME, G, False),
    ("writer", Need.LOOKUP, G, True),
    ("writer", Need.NAMESPACE_LOOKUP, G, True),
    ("writer", Need.TENANT_ADMIN, G, False),
    ("reader", Need.CONSUME, G, True),
    ("reader", Need.PRODUCE, G, False),
    ("reader", Need.LOOKUP, G, True),
    ("both", Need.PRODUCE, G, True),
    ("both", Need.CONSUME, G, True),
    # stored-but-unused actions grant nothing here
    ("worker", Need.PRODUCE, G, False),
    ("worker", Need.LOOKUP, G, False),
    # topic grants count for the topic, not for listing the namespace
    ("t-writer", Need.PRODUCE, G, True),
    ("t-writer", Need.LOOKUP, G, True),
    ("t-writer", Need.CONSUME, G, False),
    ("t-writer", Need.NAMESPACE_LOOKUP, G, False),
    ("t-reader", Need.CONSUME, G, True),
    # strangers and the anonymous client
    ("nobody", Need.LOOKUP, G, False),
    ("nobody", Need.OPEN, G, True),
    (None, Need.PRODUCE, G, False),
    (None, Need.LOOKUP, G, False),
    (None, Need.OPEN, G, True),
    (None, Need.SUPERUSER, G, False),
])
def test_rule(role, need, grants, expected):
    assert allows(role, need, SUPERS, grants) is expected


@pytest.mark.parametrize("role, need, resource, words", [
    ("alice", Need.PRODUCE, parse_topic("persistent://t/ns/x"), ["'alice'", "produce on", "persistent://t/ns/x"]),
    ("alice", Need.CONSUME, parse_topic("persistent://t/ns/x"), ["'alice'", "consume from", "persistent://t/ns/x"]),
    ("alice", Need.LOOKUP, parse_topic("persistent://t/ns/x"), ["'alice'", "look up", "persistent://t/ns/x"]),
    ("alice", Need.NAMESPACE_LOOKUP, parse_namespace("t/ns"), ["'alice'", "list the topics of", "namespace t/ns"]),
    ("alice", Need.TENANT_ADMIN, "t", ["'alice'", "administer", "tenant t"]),
    ("alice", Need.SUPERUSER, "PUT /admin/v2/tenants/x", ["'alice'", "superuser", "PUT /admin/v2/tenants/x"]),
    (None, Need.PRODUCE, parse_topic("persistent://t/ns/x"), ["anonymous", "anonymous_user_role", "produce on"]),
])
def test_refusal_names_role_action_and_resource(role, need, resource, words):
    message = refusal(role, need, resource)
    for word in words:
        assert word in message


@pytest.mark.parametrize("auth_role, anonymous, expected", [
    ("alice", None, "alice"), ("alice", "anon", "alice"), (None, "anon", "anon"), (None, None, None),
])
def test_effective_role_is_the_authenticated_one_else_the_anonymous_role(auth_role, anonymous, expected):
    config = BrokerConfig(metadata_store_url="memory://x", anonymous_user_role=anonymous)
    conn = types.SimpleNamespace(config=config)
    if auth_role is not None:
        conn.auth_role = auth_role
    assert effective_role(conn) == expected
    assert request_role({HTTP_ROLE_KEY: auth_role} if auth_role else {}, config) == expected


@pytest.mark.parametrize("actions, expected", [
    (["produce"], ["produce"]),
    (["consume", "produce", "consume"], ["consume", "produce"]),
    ([], []),
    (list(AUTH_ACTIONS), sorted(AUTH_ACTIONS)),
])
def test_actions_are_pulsars(actions, expected):
    assert parse_actions(actions) == expected


@pytest.mark.parametrize("bad", [["write"], "produce", [1], {"produce": True}, None, ["produce", "admin"]])
def test_unknown_or_malformed_actions_are_refused(bad):
    with pytest.raises(InvalidPoliciesError) as info:
        parse_actions(bad)
    assert info.value.http_status == 400


def test_auth_policies_in_pulsars_shape_round_trip_through_namespace_policies():
    doc = {"auth_policies": {"namespace_auth": {"app": ["produce", "consume"]},
                             "destination_auth": {"persistent://t/ns/x": {"r": ["consume"]}}},
           "deduplication_enabled": True}
    policies = NamespacePolicies.from_json(doc)
    assert policies.auth_policies == {"namespace_auth": {"app": ["consume", "produce"]},
                                      "destination_auth": {"persistent://t/ns/x": {"r": ["consume"]}},
                                      "subscription_auth_roles": {}}
    assert NamespacePolicies.from_json(policies.to_json()) == policies


@pytest.mark.parametrize("bad", [
    {"namespace_auth": {"app": ["fly"]}},
    {"namespace_auth": ["app"]},
    {"namespace_auth": {"": ["produce"]}},
    {"namespace_auth": {"x" * 300: ["produce"]}},
    {"namespace_auth": {f"r{i}": ["produce"] for i in range(1001)}},
    {"destination_auth": {"t": ["produce"]}},
    {"surprise": {}},
    "all",
])
def test_malformed_auth_policies_are_refused(bad):
    with pytest.raises(InvalidPoliciesError):
        normalize_auth_policies(bad)


@pytest.mark.parametrize("bad", [{"adminRoles": "boss"}, {"adminRoles": [3]}, {"allowedClusters": "c"}, []])
def test_malformed_tenant_info_is_refused(bad):
    with pytest.raises(InvalidPoliciesError):
        TenantInfo.from_json(bad)


def test_every_http_route_declares_what_it_needs():
    """A route without ``@requires`` would be refused at run time with authorization on; this keeps new routes
    from being added without a decision."""
    app = build_app(object())
    undeclared, tenantless = [], []
    for route in app.router.routes():
        need = getattr(route.handler, "required_access", None)
        where = f"{route.method} {route.resource.canonical}"
        if not isinstance(need, Need):
            undeclared.append(where)
        elif need in (Need.TENANT_ADMIN, Need.LOOKUP) and "{tenant}" not in route.resource.canonical:
            tenantless.append(where)
    assert not undeclared, f"routes without @requires: {undeclared}"
    assert not tenantless, f"routes that need a tenant's grants but name no tenant: {tenantless}"


# ---- the cache and live re-checks (in-process, embedded store) -----------------------------------------------


class FakeConnection:
    """What a ServerConnection offers a producer and a consumer, recording what the broker told the client."""

    def __init__(self, config, role):
        self.config, self.auth_role = config, role
        self.producers: dict = {}
        self.consumers: dict = {}
        self.closed_producers: list[int] = []
        self.closed_consumers: list[int] = []
        self.out = types.SimpleNamespace(close_producer=self.closed_producers.append,
                                         close_consumer=self.closed_consumers.append)


class FakeSubscription:
    def __init__(self, name, consumers):
        self.name, self.consumers = name, list(consumers)

    async def remove_consumer(self, consumer):
        self.consumers.remove(consumer)


class FakeTopic:
    def __init__(self, name, producers, subscriptions):
        self.name, self.producers, self.subscriptions = parse_topic(name), list(producers), subscriptions

    def remove_producer(self, producer):
        self.producers.remove(producer)


@pytest.fixture
async def authz():
    config = BrokerConfig(metadata_store_url=f"memory://{uuid.uuid4().hex}", authorization_enabled=True,
                          super_user_roles=("root",))
    store = await open_store(config.metadata_store_url)
    resources = Resources(store)
    await resources.create_tenant("t", TenantInfo(["boss"], []))
    await resources.create_namespace(parse_namespace("t/ns"))
    service = types.SimpleNamespace(config=config, store=store, topics={})
    authorization = AuthorizationService(service)
    yield types.SimpleNamespace(service=service, authz=authorization, resources=resources, config=config)
    authorization.close()
    await store.close()


def _grant(role, actions):
    def change(auth):
        if actions is None:
            auth["namespace_auth"].pop(role, None)
        else:
            auth["namespace_auth"][role] = actions
        return auth
    return change


async def test_a_grant_and_a_revocation_are_seen_through_the_watch(authz):
    topic = parse_topic("persistent://t/ns/x")
    with pytest.raises(AuthorizationError, match="'app' is not allowed to produce on topic persistent://t/ns/x"):
        await authz.authz.check("app", topic, Need.PRODUCE)
    await authz.resources.update_auth_policies(parse_namespace("t/ns"), _grant("app", ["produce"]))
    await wait_until_async(lambda: authz.authz.allowed("app", topic, Need.PRODUCE), 5, "the grant to be seen")
    await authz.resources.update_auth_policies(parse_namespace("t/ns"), _grant("app", None))
    await wait_until_async(lambda: _negated(authz.authz.allowed("app", topic, Need.PRODUCE)), 5,
                           "the revocation to be seen")


async def _negated(awaitable):
    return not await awaitable


async def test_tenant_admin_roles_are_watched_too(authz):
    assert await authz.authz.allowed("boss", "t", Need.TENANT_ADMIN)
    await authz.service.store.set("/admin/policies/t", b'{"adminRoles": ["other"], "allowedClusters": []}')
    await wait_until_async(lambda: _negated(authz.authz.allowed("boss", "t", Need.TENANT_ADMIN)), 5,
                           "the admin role change to be seen")
    assert await authz.authz.allowed("other", parse_topic("persistent://t/ns/y"), Need.CONSUME)


async def test_a_revocation_closes_live_producers_and_consumers_of_that_role_only(authz):
    ns = parse_namespace("t/ns")
    await authz.resources.update_auth_policies(ns, _grant("app", ["produce", "consume"]))
    await authz.resources.update_auth_policies(ns, _grant("keeper", ["produce", "consume"]))
    app, keeper = FakeConnection(authz.config, "app"), FakeConnection(authz.config, "keeper")
    producers = [Producer(1, "p-app", app), Producer(2, "p-keeper", keeper)]
    consumers = [Consumer(7, "c-app", app), Consumer(8, "c-keeper", keeper)]
    sub = FakeSubscription("s", consumers)
    topic = FakeTopic("persistent://t/ns/x", producers, {"s": sub})
    authz.service.topics[str(topic.name)] = topic
    other = FakeTopic("persistent://t/other/x", [Producer(3, "p-elsewhere", app)], {})
    authz.service.topics[str(other.name)] = other
    assert await authz.authz.recheck("/admin/policies/t/ns") == 0  # also caches (and watches) the grants

    await authz.resources.update_auth_policies(ns, _grant("app", None))

    await wait_until_async(lambda: app.closed_producers and app.closed_consumers, 5,
                           lambda: f"app's clients to be closed (closed: {app.closed_producers}, {app.closed_consumers})")
    assert app.closed_producers == [1] and app.closed_consumers == [7]
    assert [p.name for p in topic.producers] == ["p-keeper"] and [c.name for c in sub.consumers] == ["c-keeper"]
    assert keeper.closed_producers == [] and keeper.closed_consumers == []
    assert [p.name for p in other.producers] == ["p-elsewhere"]  # another namespace was not re-checked


async def test_a_change_during_a_read_is_not_lost(authz):
    """The watch fires while the first read is in flight: that read's answer is not trusted, the node is read
    again, so the cache never keeps a value older than the last change."""
    ns, topic = parse_namespace("t/ns"), parse_topic("persistent://t/ns/x")
    store = authz.service.store
    real_get, reads = store.get, []

    async def racing_get(path):
        answer = await real_get(path)
        reads.append(path)
        if path.endswith("/t/ns") and len([r for r in reads if r.endswith("/t/ns")]) == 1:
            await authz.resources.update_auth_policies(ns, _grant("app", ["consume"]))
            await wait_until_async(lambda: not authz.authz._nodes[path].fresh and authz.authz._nodes[path].generation,
                                   5, "the watch to fire")
        return answer

    store.get = racing_get
    assert await authz.authz.allowed("app", topic, Need.CONSUME)


async def test_authorization_off_reads_nothing(authz):
    service = types.SimpleNamespace(config=BrokerConfig(metadata_store_url="memory://none"), store=None, topics={})
    off = AuthorizationService(service)  # a store of None would fail on any read
    assert await off.allowed(None, parse_topic("persistent://t/ns/x"), Need.SUPERUSER)
    assert await off.recheck("/admin/policies") == 0


async def test_superusers_read_nothing(authz):
    authz.authz.store = None  # any read would fail
    assert await authz.authz.allowed("root", parse_topic("persistent://nowhere/ns/x"), Need.PRODUCE)
    with pytest.raises(AuthorizationError, match="anonymous"):
        await authz.authz.check(None, parse_topic("persistent://nowhere/ns/x"), Need.LOOKUP)


async def test_a_client_attached_after_a_change_it_was_checked_before_is_checked_again(authz):
    """The window of a topic load: PRODUCER is checked, the grant is revoked (and the re-check finds nothing yet),
    then the producer is attached. ``admitted`` sees that grants changed since the check and closes it."""
    ns, name = parse_namespace("t/ns"), parse_topic("persistent://t/ns/x")
    await authz.resources.update_auth_policies(ns, _grant("app", ["produce"]))
    app = FakeConnection(authz.config, "app")
    checked_at = await authz.authz.check("app", name, Need.PRODUCE)
    await authz.resources.update_auth_policies(ns, _grant("app", None))
    await wait_until_async(lambda: authz.authz.changes != checked_at, 5, "the revocation to be heard")
    topic = FakeTopic(str(name), [Producer(1, "late", app)], {})
    authz.service.topics[str(name)] = topic
    authz.authz.admitted(topic, checked_at)
    await wait_until_async(lambda: app.closed_producers == [1], 5, "the late producer to be closed")
    assert topic.producers == []


async def test_a_client_attached_with_no_change_since_its_check_is_left_alone(authz):
    ns, name = parse_namespace("t/ns"), parse_topic("persistent://t/ns/x")
    await authz.resources.update_auth_policies(ns, _grant("app", ["produce"]))
    await wait_until_async(lambda: authz.authz.allowed("app", name, Need.PRODUCE), 5, "the grant")
    checked_at = await authz.authz.check("app", name, Need.PRODUCE)
    app = FakeConnection(authz.config, "app")
    topic = FakeTopic(str(name), [Producer(1, "on-time", app)], {})
    authz.authz.admitted(topic, checked_at)
    assert not authz.authz._tasks  # nothing to re-check
    assert [p.name for p in topic.producers] == ["on-time"]


async def test_a_partition_has_its_partitioned_topics_grants(authz):
    ns = parse_namespace("t/ns")

    def change(auth):
        auth["destination_auth"]["persistent://t/ns/parted"] = {"app": ["consume"]}
        auth["destination_auth"]["persistent://t/ns/parted-partition-1"] = {"app": ["produce"]}
        return auth

    await authz.resources.update_auth_policies(ns, change)
    p1, p0 = parse_topic("persistent://t/ns/parted-partition-1"), parse_topic("persistent://t/ns/parted-partition-0")
    await wait_until_async(lambda: authz.authz.allowed("app", p1, Need.CONSUME), 5, "the grants")
    assert await authz.authz.allowed("app", p1, Need.PRODUCE)  # its own
    assert await authz.authz.allowed("app", p0, Need.CONSUME)  # inherited
    assert not await authz.authz.allowed("app", p0, Need.PRODUCE)
    assert not await authz.authz.allowed("app", parse_topic("persistent://t/ns/parted-2"), Need.CONSUME)


async def test_a_tenant_admin_removed_from_adminroles_loses_its_clients_in_every_namespace(authz):
    await authz.resources.create_namespace(parse_namespace("t/second"))
    boss = FakeConnection(authz.config, "boss")
    topics = [FakeTopic(f"persistent://t/{ns}/x", [Producer(i, f"p{i}", boss)], {}) for i, ns in enumerate(("ns", "second"))]
    for topic in topics:
        authz.service.topics[str(topic.name)] = topic
    assert await authz.authz.recheck("/admin/policies/t") == 0
    await authz.resources.update_tenant("t", TenantInfo(["someone-else"], []))
    await wait_until_async(lambda: sorted(boss.closed_producers) == [0, 1], 5, "both producers to be closed")


async def test_a_lost_session_forgets_the_cache_and_checks_every_client_again(authz):
    """A watch that could have missed a change (the session was lost) is not trusted: everything is re-read."""
    ns, name = parse_namespace("t/ns"), parse_topic("persistent://t/ns/x")
    await authz.resources.update_auth_policies(ns, _grant("app", ["produce"]))
    app = FakeConnection(authz.config, "app")
    authz.service.topics[str(name)] = FakeTopic(str(name), [Producer(1, "p", app)], {})
    assert await authz.authz.recheck("/admin/policies") == 0
    node = authz.authz._nodes["/admin/policies/t/ns"]
    node.watch.cancel()  # the change below goes unheard, as it could while the session is down
    await authz.resources.update_auth_policies(ns, _grant("app", None))
    assert await authz.authz.allowed("app", name, Need.PRODUCE)  # stale, for now
    await authz.service.store.expire_session()
    await wait_until_async(lambda: app.closed_producers == [1], 5, "the producer to be closed after the session loss")
    assert not await authz.authz.allowed("app", name, Need.PRODUCE)


async def test_the_cache_is_bounded_and_evicted_nodes_stop_being_watched(authz, monkeypatch):
    monkeypatch.setattr(authorization_module, "MAX_CACHED_NODES", 3)
    watches = []
    for i in range(6):
        await authz.authz.allowed("someone", f"tenant{i}", Need.TENANT_ADMIN)
        watches.append(authz.authz._nodes[f"/admin/policies/tenant{i}"].watch)
    assert list(authz.authz._nodes) == [f"/admin/policies/tenant{i}" for i in (3, 4, 5)]
    assert [w.cancelled for w in watches] == [True, True, True, False, False, False]  # the embedded store's handle
    await authz.resources.create_tenant("tenant0", TenantInfo(["someone"], []))  # evicted: not cached, not heard
    await authz.resources.create_tenant("tenant5", TenantInfo(["someone"], []))  # cached: heard
    await wait_until_async(lambda: authz.authz.allowed("someone", "tenant5", Need.TENANT_ADMIN), 5, "the change")
    assert await authz.authz.allowed("someone", "tenant0", Need.TENANT_ADMIN)  # read afresh on its next use


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]"])
async def test_a_node_that_is_not_a_policies_document_grants_nothing(authz, data):
    await authz.service.store.create("/admin/policies/bare", data)
    await authz.service.store.create("/admin/policies/bare/ns", data)
    topic = parse_topic("persistent://bare/ns/x")
    assert not await authz.authz.allowed("app", topic, Need.LOOKUP)
    assert not await authz.authz.allowed("app", "bare", Need.TENANT_ADMIN)
    assert await authz.authz.allowed("root", topic, Need.PRODUCE)


async def test_a_topic_in_a_missing_namespace_is_not_found_rather_than_refused(authz):
    """Pulsar's answer (the official client's suite expects TopicNotFound creating a producer on tenant/ns/x)."""
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        await authz.authz.check("someone", parse_topic("persistent://nowhere/ns/x"), Need.PRODUCE)
    await authz.resources.update_auth_policies(parse_namespace("t/ns"), _grant("app", ["produce"]))
    with pytest.raises(AuthorizationError):  # an existing namespace without a grant is a refusal
        await authz.authz.check("someone", parse_topic("persistent://t/ns/x"), Need.PRODUCE)
