"""Admin REST and lookup routes in Pulsar's shapes (``/admin/v2/...``, ``/lookup/v2/...``), plus health and metrics.

Errors are JSON ``{"reason": ...}`` with Pulsar's status codes: 412 for an
invalid name (or bundle range), 404 for something missing, 409 for a conflict,
405 for an operation not allowed, 400 for a malformed body, 500 otherwise.
A bundle operation sent to a broker that does not own the bundle is
redirected (307) to its owner, as in Pulsar (from a browser, sent on there
instead: broker/http/forwarding.py). Each route declares with
``@requires`` what its caller needs (broker/http/permissions.py enforces it:
403 with the reason): superuser for tenants and broker-wide state, a tenant
admin for a tenant's namespaces and topics, lookup permission for a lookup.
"""

from __future__ import annotations

import json

from aiohttp import web

from broker.errors import BrokerError, BundleServedElsewhereError, InvalidBundleError, SubscriptionNotFoundError
from broker.http.forwarding import from_a_browser
from broker.http.lookup import answer_lookup
from broker.http.metrics import render_metrics
from broker.http.workers_metrics import merged_metrics
from broker.ownership.bundles import SPLIT_ALGORITHMS, NamespaceBundles, bundle_name, parse_bundle_name
from broker.ownership.resources import ConflictError, NamespacePolicies, NotFoundError, TenantInfo
from broker.security.authorization import Need, requires
from broker.topics.names import parse_namespace, parse_topic

SERVICE = web.AppKey("service", object)
routes = web.RouteTableDef()


def error_response(exc: Exception) -> web.Response:
    """A broker error answers with its ``http_status`` (the ServerError table's, or its class's own, e.g. 409 for
    ConflictError); anything else is a 500 that names the exception's type."""
    if isinstance(exc, (BrokerError, BadRequest)):
        return web.json_response({"reason": str(exc)}, status=exc.http_status)
    return web.json_response({"reason": f"{type(exc).__name__}: {exc}"}, status=500)


class BadRequest(Exception):
    """The request body is not what the route expects."""

    http_status = 400


async def _json(request, default=None):
    if not request.can_read_body:
        return default
    try:
        return json.loads(await request.text())
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


MAX_INT_FIELD = 2**31 - 1  # Pulsar's policy fields are Java ints


def _int_field(body: dict, name: str, *, minimum: int = 0, default: int = 0) -> int:
    """An integer field of a JSON body, within minimum..MAX_INT_FIELD; BadRequest naming it otherwise."""
    value = body.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_INT_FIELD:
        raise BadRequest(f"{name} must be an integer in {minimum}..{MAX_INT_FIELD}, got {value!r}"[:300])
    return value


def _service(request):
    return request.app[SERVICE]


def _topic(request):
    m = request.match_info
    return parse_topic(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")


def _ns(request) -> NamespaceName:
    return parse_namespace(f"{request.match_info['tenant']}/{request.match_info['ns']}")


# ---- health and metrics -----------------------------------------------------------


@routes.get("/health")
@requires(Need.OPEN)
async def health(request):
    return web.Response(text="OK")


@routes.get("/admin/v2/brokers/health")
@requires(Need.SUPERUSER)
async def broker_health(request):
    return web.Response(text="ok")


@routes.get("/metrics")
@requires(Need.OPEN)
async def metrics(request):
    service = _service(request)
    body = render_metrics(service)
    if service.config.metrics_worker_urls:  # worker 0 of several: the host's /metrics covers them all
        body = await merged_metrics(body, service.config.metrics_worker_urls, request.headers.get("Authorization"),
                                    service.config)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


# ---- load management --------------------------------------------------------------


@routes.get("/admin/v2/broker-stats/load-report")
@requires(Need.SUPERUSER)
async def load_report(request):
    """This broker's load report as published in ``/loadbalance/brokers/<id>`` (Pulsar's LocalBrokerData shape),
    with per-bundle stats under ``lastStats``; refreshed every ``load_report_interval_s``."""
    return web.json_response(_service(request).ownership.report_json())


@routes.get("/admin/v2/brokers/leaderBroker")
@requires(Need.SUPERUSER)
async def leader_broker(request):
    """The load-balancer leader, which runs load shedding (404 until one is elected)."""
    leader = await _service(request).load_manager.election.leader()
    if leader is None:
        raise NotFoundError("no load-balancer leader is elected yet")
    return web.json_response({"brokerId": leader.broker_id, "serviceUrl": leader.web_url(request.secure)})


# ---- tenants and namespaces ---------------------------------------------------------


@routes.get("/admin/v2/tenants")
@requires(Need.SUPERUSER)
async def list_tenants(request):
    return web.json_response(await _service(request).resources.tenants())


@routes.put("/admin/v2/tenants/{tenant}")
@requires(Need.SUPERUSER)
async def create_tenant(request):
    body = await _json(request, {}) or {}
    await _service(request).resources.create_tenant(request.match_info["tenant"], TenantInfo.from_json(body))
    return web.Response(status=204)


@routes.get("/admin/v2/tenants/{tenant}")
@requires(Need.TENANT_ADMIN)
async def get_tenant(request):
    return web.json_response((await _service(request).resources.get_tenant(request.match_info["tenant"])).to_json())


@routes.delete("/admin/v2/tenants/{tenant}")
@requires(Need.SUPERUSER)
async def delete_tenant(request):
    await _service(request).resources.delete_tenant(request.match_info["tenant"])
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}")
@requires(Need.TENANT_ADMIN)
async def list_namespaces(request):
    return web.json_response(await _service(request).resources.namespaces(request.match_info["tenant"]))


@routes.put("/admin/v2/namespaces/{tenant}/{ns}")
@requires(Need.TENANT_ADMIN)
async def create_namespace(request):
    body = await _json(request, {}) or {}
    if not isinstance(body, dict):
        raise BadRequest(f"namespace policies must be a JSON object, got {body!r}")
    service = _service(request)
    bundles = None
    if body.get("bundles") is not None:
        bundles = NamespaceBundles.requested(body["bundles"], service.config.load_balancer_namespace_maximum_bundles)
    await service.resources.create_namespace(_ns(request), NamespacePolicies.from_json(body), bundles)
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}/{ns}")
@requires(Need.TENANT_ADMIN)
async def get_policies(request):
    return web.json_response((await _service(request).resources.get_policies(_ns(request))).to_json())


async def _bundle_here(request) -> tuple[str | None, tuple[int, int]]:
    """(node path if this broker owns it, else None when nobody does; range) of the bundle in the URL.
    Raises InvalidBundleError (412), NotFoundError (404: no such namespace or not one of its bundles), or
    redirects (307) to the broker that owns it."""
    service, ns = _service(request), _ns(request)
    bundle = parse_bundle_name(request.match_info["bundle"])
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    bundles = await service.ownership.namespace_bundles(ns, fresh=True)
    if bundle not in bundles:
        raise NotFoundError(f"{bundle_name(bundle)} is not a bundle of {ns}; its bundles: {bundles.names()}")
    path = service.ownership.bundle_path(ns, bundle)
    if path in service.ownership.owned:
        return path, bundle
    owner = await service.ownership.owner_at(path)
    if owner is None:
        return None, bundle
    if from_a_browser(request):  # the operator console: sent on to the owner (broker/http/forwarding.py)
        raise BundleServedElsewhereError(f"bundle {bundle_name(bundle)} of {ns} is owned by broker {owner.broker_id}",
                                         owner)
    raise web.HTTPTemporaryRedirect(
        f"{owner.web_url(request.secure)}{request.path_qs}", content_type="application/json",
        text=json.dumps({"reason": f"bundle {bundle_name(bundle)} of {ns} is owned by broker {owner.broker_id}"}))


@routes.put("/admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload")
@requires(Need.SUPERUSER)
async def unload_bundle(request):
    """Graceful unload of one bundle: its topics close and reload wherever lookup sends them. An unowned bundle
    is unloaded already (Pulsar answers the same)."""
    path, _ = await _bundle_here(request)
    if path is not None:
        await _service(request).unload_bundle(path)
    return web.Response(status=204)


@routes.put("/admin/v2/namespaces/{tenant}/{ns}/{bundle}/split")
@requires(Need.SUPERUSER)
async def split_bundle(request):
    """Split a bundle this broker owns at its midpoint (``range_equally_divide``); its topics stay served here,
    or with ``?unload=true`` both halves are unloaded and placed afresh by the next lookups."""
    algorithm = request.query.get("splitAlgorithmName", SPLIT_ALGORITHMS[0])
    if algorithm not in SPLIT_ALGORITHMS:
        raise InvalidBundleError(f"unsupported split algorithm {algorithm!r}; supported: {', '.join(SPLIT_ALGORITHMS)}")
    path, bundle = await _bundle_here(request)
    ns = _ns(request)
    if path is None:
        raise ConflictError(f"bundle {bundle_name(bundle)} of {ns} is not owned by any broker: a lookup of one of "
                            "its topics assigns it, and its owner splits it")
    await _service(request).split_bundle(ns, bundle, request.query.get("unload", "false").lower() == "true")
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}/{ns}/bundles")
@requires(Need.TENANT_ADMIN)
async def namespace_bundles(request):
    """Pulsar's BundlesData (``boundaries``, ``numBundles``), plus ``owned``: the bundles this broker owns."""
    service, ns = _service(request), _ns(request)
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    bundles = await service.ownership.namespace_bundles(ns, fresh=True)
    return web.json_response({**bundles.to_json(), "owned": service.ownership.owned_bundles(ns)})


@routes.delete("/admin/v2/namespaces/{tenant}/{ns}")
@requires(Need.TENANT_ADMIN)
async def delete_namespace(request):
    await _service(request).resources.delete_namespace(_ns(request))
    return web.Response(status=204)


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/retention")
@requires(Need.TENANT_ADMIN)
async def set_retention(request):
    body = await _json(request)
    if not isinstance(body, dict):
        raise BadRequest('expected {"retentionTimeInMinutes": N, "retentionSizeInMB": N}')
    await _service(request).resources.update_policies(
        _ns(request), retention_time_minutes=_int_field(body, "retentionTimeInMinutes", minimum=-1),
        retention_size_mb=_int_field(body, "retentionSizeInMB", minimum=-1))
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}/{ns}/retention")
@requires(Need.TENANT_ADMIN)
async def get_retention(request):
    p = await _service(request).resources.get_policies(_ns(request))
    return web.json_response({"retentionTimeInMinutes": p.retention_time_minutes or 0, "retentionSizeInMB": p.retention_size_mb or 0})


_NS_FLAGS = {
    "deduplication": ("deduplication_enabled", bool),
    "maxProducersPerTopic": ("max_producers_per_topic", int),
    "maxConsumersPerTopic": ("max_consumers_per_topic", int),
    "maxConsumersPerSubscription": ("max_consumers_per_subscription", int),
    "maxUnackedMessagesPerConsumer": ("max_unacked_messages_per_consumer", int),
    "maxUnackedMessagesPerSubscription": ("max_unacked_messages_per_subscription", int),
    "compactionThreshold": ("compaction_threshold", int),  # bytes after the compaction horizon
}


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/{policy}")
@requires(Need.TENANT_ADMIN)
async def set_policy(request):
    field, kind = _policy_field(request)
    value = await _json(request)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"{request.match_info['policy']} expects a JSON {kind.__name__}")
    if kind is int and not 0 <= value <= MAX_INT_FIELD:
        raise BadRequest(f"{request.match_info['policy']} must be in 0..{MAX_INT_FIELD}, got {value}")
    await _service(request).resources.update_policies(_ns(request), **{field: value})
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}/{ns}/{policy}")
@requires(Need.TENANT_ADMIN)
async def get_policy(request):
    field, _ = _policy_field(request)
    return web.json_response(getattr(await _service(request).resources.get_policies(_ns(request)), field))


def _policy_field(request):
    try:
        return _NS_FLAGS[request.match_info["policy"]]
    except KeyError:
        raise web.HTTPNotFound(text=json.dumps({"reason": f"unknown policy {request.match_info['policy']!r}"}),
                               content_type="application/json")


# ---- topics -------------------------------------------------------------------------


@routes.get("/admin/v2/persistent/{tenant}/{ns}")
@requires(Need.TENANT_ADMIN)
async def list_topics(request):
    return web.json_response([str(t) for t in await _service(request).resources.topics(_ns(request))])


@routes.get("/admin/v2/persistent/{tenant}/{ns}/partitioned")
@requires(Need.TENANT_ADMIN)
async def list_partitioned(request):
    return web.json_response([str(t) for t in await _service(request).resources.partitioned_topics(_ns(request))])


@routes.put("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def create_partitioned(request):
    partitions = await _json(request)
    if not isinstance(partitions, int) or isinstance(partitions, bool):
        raise BadRequest("the body must be the number of partitions")
    service, topic = _service(request), _topic(request)
    if await service.factory.exists(topic.managed_ledger_name):
        raise ConflictError(f"a non-partitioned topic {topic} already exists")
    await service.create_partitioned_topic(topic, partitions)
    return web.Response(status=204)


@routes.post("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def update_partitioned(request):
    partitions = await _json(request)
    if not isinstance(partitions, int) or isinstance(partitions, bool):
        raise BadRequest("the body must be the number of partitions")
    await _service(request).create_partitioned_topic(_topic(request), partitions, update=True)
    return web.Response(status=204)


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitions")
@requires(Need.LOOKUP)  # Pulsar: the partitioned metadata is a lookup (clients on an http:// service URL call it)
async def get_partitions(request):
    return web.json_response({"partitions": await _service(request).resources.partition_count(_topic(request))})


@routes.put("/admin/v2/persistent/{tenant}/{ns}/{topic}")
@requires(Need.TENANT_ADMIN)
async def create_topic(request):
    await _service(request).create_topic(_topic(request))
    return web.Response(status=204)


@routes.delete("/admin/v2/persistent/{tenant}/{ns}/{topic}")
@requires(Need.TENANT_ADMIN)
async def delete_topic(request):
    """``?force=true`` disconnects the topic's producers and consumers first (else 405 while any is connected)."""
    service, topic = _service(request), _topic(request)
    if not await service.factory.exists(topic.managed_ledger_name):
        raise NotFoundError(f"topic {topic} does not exist")
    await service.delete_topic(topic, force=request.query.get("force", "false").lower() == "true")
    return web.Response(status=204)


async def _loaded(request):
    service, topic = _service(request), _topic(request)
    if not await service.factory.exists(topic.managed_ledger_name):
        if await service.resources.partition_count(topic):  # 404 still, as Pulsar answers; the reason says why
            raise NotFoundError(f"topic {topic} does not exist as such: it is a partitioned topic (its stats are "
                                f"partitioned-stats; its partitions are {topic}-partition-<i>)")
        raise NotFoundError(f"topic {topic} does not exist")
    return await service.get_topic(topic, create=False)


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/stats")
@requires(Need.TENANT_ADMIN)
async def topic_stats(request):
    topic = await _loaded(request)
    return web.json_response(_service(request).topic_stats.add_rates(str(topic.name), topic.stats()))


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats")
@requires(Need.TENANT_ADMIN)
async def internal_stats(request):
    return web.json_response((await _loaded(request)).internal_stats())


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/lastMessageId")
@requires(Need.TENANT_ADMIN)
async def last_message_id(request):
    """Pulsar's shape; an empty topic answers entryId -1."""
    topic = await _loaded(request)
    position, batch_index = await topic.last_message_id()
    return web.json_response({"ledgerId": position.ledger_id, "entryId": position.entry_id,
                              "partitionIndex": topic.name.partition_index, "batchIndex": batch_index})


# ---- subscriptions ----------------------------------------------------------------------


def _subscription(topic, name):
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise SubscriptionNotFoundError(f"subscription {name} does not exist on {topic.name}")
    return sub


# ---- lookup -------------------------------------------------------------------------------


@routes.get("/lookup/v2/topic/persistent/{tenant}/{ns}/{topic}")
@requires(Need.LOOKUP)
async def lookup(request):
    """The owner of the topic's bundle; an unowned bundle goes to the broker placement chooses (broker/http/lookup.py)."""
    return await answer_lookup(request, _service(request), _topic(request))
