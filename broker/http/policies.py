"""Lifecycle and limit policies in Pulsar's REST shapes, at namespace and at topic level.

Namespace: ``/admin/v2/namespaces/{tenant}/{ns}/{policy}``; topic:
``/admin/v2/persistent/{tenant}/{ns}/{topic}/{policy}`` (and ``/admin/v2/non-persistent/...``: limits,
deduplication and the rest are kept for a non-persistent topic too, under its own name). ``POST`` sets,
``GET`` reads (204 with no body when unset, as Pulsar answers; a topic's
``GET ...?applied=true`` answers the value in force: the topic's, else its
namespace's, else the broker's), ``DELETE`` removes. A topic's policies
override its namespace's; they are kept in the metadata store
(``/admin/topic-policies/...``, broker/ownership/resources.py), so they
survive a failover. Every change applies at once to the topics loaded here
and, through the metadata watch (broker/ownership/policy_watch.py), within
moments on every other broker.

Backlog quotas: ``POST .../backlogQuota?backlogQuotaType=destination_storage|message_age``
with ``{"limitSize", "limitTime", "policy"}``, ``GET .../backlogQuotaMap``,
``DELETE .../backlogQuota?backlogQuotaType=...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from aiohttp import web

from broker.http.admin import MAX_INT_FIELD, SERVICE, BadRequest, _int_field, _json, _ns
from broker.http.non_persistent import served_here
from broker.http.partitions import url_topic
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics.lifecycle_policies import (
    BacklogQuota, PolicyDocumentError, check_inactive_topic_policies, check_minutes, check_persistence,
    check_quota_type, check_ttl,
)

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{ns}"
TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
NP_PREFIX = "/admin/v2/non-persistent/"
NP_TOPIC = NP_PREFIX + "{tenant}/{ns}/{topic}"


def _int_policy(name: str):
    def parse(value) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT_FIELD:
            raise BadRequest(f"{name} must be an integer in 0..{MAX_INT_FIELD}, got {value!r}"[:300])
        return value
    return parse


def _bool_policy(name: str):
    def parse(value) -> bool:
        if not isinstance(value, bool):
            raise BadRequest(f"{name} expects a JSON bool, got {value!r}"[:300])
        return value
    return parse


def _retention(body) -> dict:
    if not isinstance(body, dict):
        raise BadRequest('expected {"retentionTimeInMinutes": N, "retentionSizeInMB": N}')
    return {"retention_time_minutes": _int_field(body, "retentionTimeInMinutes", minimum=-1),
            "retention_size_mb": _int_field(body, "retentionSizeInMB", minimum=-1)}


def _retention_json(p):
    if p.retention_time_minutes is None and p.retention_size_mb is None:
        return None
    return {"retentionTimeInMinutes": p.retention_time_minutes or 0, "retentionSizeInMB": p.retention_size_mb or 0}


@dataclass(frozen=True)
class Policy:
    """One REST policy: how a body becomes attribute changes, and how the attributes answer a GET."""

    attrs: tuple[str, ...]
    parse: Callable[[object], dict]
    render: Callable[[object], object]

    def clear(self) -> dict:
        return {a: None for a in self.attrs}


def _single(attr: str, check) -> Policy:
    def parse(value):
        try:
            return {attr: check(value)}
        except PolicyDocumentError as exc:
            raise BadRequest(str(exc)) from exc
    return Policy((attr,), parse, lambda p: getattr(p, attr))


_TTL = _single("message_ttl_in_seconds", check_ttl)
_PERSISTENCE = _single("persistence", check_persistence)
_INACTIVE = _single("inactive_topic_policies", check_inactive_topic_policies)
_SUB_EXPIRY = _single("subscription_expiration_time_minutes", lambda v: check_minutes(v, "subscriptionExpirationTime"))
_RETENTION = Policy(("retention_time_minutes", "retention_size_mb"), _retention, _retention_json)

# Namespace-level policies this module serves in full (POST, GET, DELETE).
NAMESPACE_POLICIES = {
    "messageTTL": _TTL,
    "persistence": _PERSISTENCE,
    "inactiveTopicPolicies": _INACTIVE,
    "subscriptionExpirationTime": _SUB_EXPIRY,
}
# Namespace policies whose POST and GET broker/http/admin.py serves: DELETE (back to the broker default) here.
NAMESPACE_DELETES = {
    "retention": _RETENTION.clear(),
    "deduplication": {"deduplication_enabled": None},
    "maxProducersPerTopic": {"max_producers_per_topic": None},
    "maxConsumersPerTopic": {"max_consumers_per_topic": None},
    "maxConsumersPerSubscription": {"max_consumers_per_subscription": None},
    "maxUnackedMessagesPerConsumer": {"max_unacked_messages_per_consumer": None},
    "maxUnackedMessagesPerSubscription": {"max_unacked_messages_per_subscription": None},
    "compactionThreshold": {"compaction_threshold": None},
}
# Topic-level policies under Pulsar's topic names.
TOPIC_POLICIES = {
    **NAMESPACE_POLICIES,
    "retention": _RETENTION,
    "deduplicationEnabled": _single("deduplication_enabled", _bool_policy("deduplicationEnabled")),
    "maxProducers": _single("max_producers_per_topic", _int_policy("maxProducers")),
    "maxConsumers": _single("max_consumers_per_topic", _int_policy("maxConsumers")),
    "maxConsumersPerSubscription": _single("max_consumers_per_subscription", _int_policy("maxConsumersPerSubscription")),
    "maxUnackedMessagesOnConsumer": _single("max_unacked_messages_per_consumer",
                                            _int_policy("maxUnackedMessagesOnConsumer")),
    "maxUnackedMessagesOnSubscription": _single("max_unacked_messages_per_subscription",
                                                _int_policy("maxUnackedMessagesOnSubscription")),
}


# ---- applying ------------------------------------------------------------------------


def _loaded_in(service, ns):
    return [t for t in service.loaded_topics() if t.name.namespace_name == ns and not t.closed]


async def _set_namespace(request, changes: dict) -> None:
    service, ns = request.app[SERVICE], _ns(request)
    policies = await service.resources.update_policies(ns, **changes)
    for topic in _loaded_in(service, ns):
        topic.apply_policies(policies)


def url_topic_of_either_domain(request):
    """The topic in the URL, ``/admin/v2/persistent/...`` or ``/admin/v2/non-persistent/...``."""
    return url_topic(request, "non-persistent" if request.path.startswith(NP_PREFIX) else "persistent")


async def _existing_topic(request):
    """(service, topic) of the URL; 404 for a persistent topic never created, or a non-persistent one nobody
    serves (asked of a broker that does not serve it, the request goes to the one that does)."""
    service, topic = request.app[SERVICE], url_topic_of_either_domain(request)
    if not topic.persistent:
        await served_here(service, topic)
    elif not (await service.factory.exists(topic.managed_ledger_name) or await service.resources.partition_count(topic)):
        raise NotFoundError(f"topic {topic} does not exist")
    return service, topic


async def _set_topic(request, changes: dict) -> None:
    service, topic = await _existing_topic(request)
    policies = await service.resources.update_topic_policies(topic, **changes)
    base = str(topic)
    for loaded in _loaded_in(service, topic.namespace_name):
        if str(loaded.name) == base or str(loaded.name.partitioned_name) == base:
            loaded.apply_topic_policies(policies)


def _answer(value) -> web.Response:
    return web.Response(status=204) if value is None else web.json_response(value)


async def _body(request):
    body = await _json(request)
    if body is None:
        raise BadRequest("the request needs a JSON body")
    return body


# ---- namespace routes -------------------------------------------------------------------


def _register_namespace(name: str, policy: Policy) -> None:
    @routes.post(f"{NS}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def set_policy(request):
        await _set_namespace(request, policy.parse(await _body(request)))
        return web.Response(status=204)

    @routes.get(f"{NS}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def get_policy(request):
        return _answer(policy.render(await request.app[SERVICE].resources.get_policies(_ns(request))))

    @routes.delete(f"{NS}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def delete_policy(request):
        await _set_namespace(request, policy.clear())
        return web.Response(status=204)


def _register_namespace_delete(name: str, changes: dict) -> None:
    @routes.delete(f"{NS}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def delete_policy(request):
        await _set_namespace(request, changes)
        return web.Response(status=204)


for _name, _policy in NAMESPACE_POLICIES.items():
    _register_namespace(_name, _policy)
for _name, _changes in NAMESPACE_DELETES.items():
    _register_namespace_delete(_name, _changes)


# ---- topic routes -------------------------------------------------------------------------


def _register_topic(name: str, policy: Policy) -> None:
    for prefix in (TOPIC, NP_TOPIC):
        _register_topic_at(prefix, name, policy)


def _register_topic_at(prefix: str, name: str, policy: Policy) -> None:
    @routes.post(f"{prefix}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def set_policy(request):
        if name == "messageTTL" and "messageTTL" in request.query:  # Pulsar's topic form: ?messageTTL=N
            raw = request.query["messageTTL"]
            if not raw.lstrip("-").isdigit() or len(raw) > 12:
                raise BadRequest(f"messageTTL must be an integer number of seconds, got {raw[:40]!r}")
            body = int(raw)
        else:
            body = await _body(request)
        await _set_topic(request, policy.parse(body))
        return web.Response(status=204)

    @routes.get(f"{prefix}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def get_policy(request):
        service, topic = await _existing_topic(request)
        own = policy.render(await service.resources.get_topic_policies(topic))
        if own is None and request.query.get("applied", "false").lower() == "true":
            own = policy.render(await service.resources.get_policies(topic.namespace_name))
            if own is None and len(policy.attrs) == 1:
                default = getattr(service.config, {"message_ttl_in_seconds": "ttl_duration_default_in_seconds"}.get(
                    policy.attrs[0], policy.attrs[0]), None)
                own = default
        return _answer(own)

    @routes.delete(f"{prefix}/{name}")
    @requires(Need.TENANT_ADMIN)
    async def delete_policy(request):
        await _set_topic(request, policy.clear())
        return web.Response(status=204)


for _name, _policy in TOPIC_POLICIES.items():
    _register_topic(_name, _policy)


# ---- backlog quotas (both levels) ---------------------------------------------------------


def _quota_type(request) -> str:
    try:
        return check_quota_type(request.query.get("backlogQuotaType"))
    except PolicyDocumentError as exc:
        raise BadRequest(str(exc)) from exc


def _quota(body) -> dict:
    try:
        return BacklogQuota.from_json(body).to_json()
    except PolicyDocumentError as exc:
        raise BadRequest(str(exc)) from exc


@routes.post(f"{NS}/backlogQuota")
@requires(Need.TENANT_ADMIN)
async def set_namespace_quota(request):
    kind, quota = _quota_type(request), _quota(await _body(request))
    current = (await request.app[SERVICE].resources.get_policies(_ns(request))).backlog_quota_map or {}
    await _set_namespace(request, {"backlog_quota_map": {**current, kind: quota}})
    return web.Response(status=204)


@routes.delete(f"{NS}/backlogQuota")
@requires(Need.TENANT_ADMIN)
async def delete_namespace_quota(request):
    kind = _quota_type(request)
    current = (await request.app[SERVICE].resources.get_policies(_ns(request))).backlog_quota_map or {}
    remaining = {k: v for k, v in current.items() if k != kind}
    await _set_namespace(request, {"backlog_quota_map": remaining or None})
    return web.Response(status=204)


@routes.get(f"{NS}/backlogQuotaMap")
@requires(Need.TENANT_ADMIN)
async def get_namespace_quotas(request):
    return web.json_response((await request.app[SERVICE].resources.get_policies(_ns(request))).backlog_quota_map or {})


@routes.post(f"{TOPIC}/backlogQuota")
@requires(Need.TENANT_ADMIN)
async def set_topic_quota(request):
    kind, quota = _quota_type(request), _quota(await _body(request))
    service, topic = await _existing_topic(request)
    current = (await service.resources.get_topic_policies(topic)).backlog_quota_map or {}
    await _set_topic(request, {"backlog_quota_map": {**current, kind: quota}})
    return web.Response(status=204)


@routes.delete(f"{TOPIC}/backlogQuota")
@requires(Need.TENANT_ADMIN)
async def delete_topic_quota(request):
    kind = _quota_type(request)
    service, topic = await _existing_topic(request)
    current = (await service.resources.get_topic_policies(topic)).backlog_quota_map or {}
    remaining = {k: v for k, v in current.items() if k != kind}
    await _set_topic(request, {"backlog_quota_map": remaining or None})
    return web.Response(status=204)


@routes.get(f"{TOPIC}/backlogQuotaMap")
@requires(Need.TENANT_ADMIN)
async def get_topic_quotas(request):
    service, topic = await _existing_topic(request)
    quotas = (await service.resources.get_topic_policies(topic)).backlog_quota_map
    if quotas is None and request.query.get("applied", "false").lower() == "true":
        quotas = (await service.resources.get_policies(topic.namespace_name)).backlog_quota_map
    return web.json_response(quotas or {})
