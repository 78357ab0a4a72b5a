"""Namespace rate policies in Pulsar's REST shapes: ``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``.

``POST /admin/v2/namespaces/{tenant}/{ns}/publishRate`` with a PublishRate
``{"publishThrottlingRateInMsg": N, "publishThrottlingRateInByte": N}``;
``.../dispatchRate`` (all of a topic's subscriptions together) and
``.../subscriptionDispatchRate`` (each subscription) with a DispatchRate
``{"dispatchThrottlingRateInMsg": N, "dispatchThrottlingRateInByte": N,
"ratePeriodInSecond": N, "relativeToPublishRate": bool}``. Missing fields take
Pulsar's defaults (-1, -1, 1, false); -1 or 0 is "no limit on that". ``GET``
answers the document as set (with every field), or 204 with no body when the
namespace has none, as Pulsar does; ``DELETE`` removes it, and the broker's
defaults (maxPublishRatePerTopicIn*, dispatchThrottlingRatePer*) apply again.

Pulsar keeps each rate per cluster in the namespace's policies
(``publishMaxMessageRate``, ``topicDispatchRate`` and ``clusterDispatchRate``,
``subscriptionDispatchRate``: {cluster: rate}); so does this module, under the
broker's ``cluster_name``. A change applies at once to the namespace's topics
loaded on this broker (broker/topics/throttling.py); other brokers' loaded
topics get it through their watch on the namespace's policies
(broker/ownership/policy_watch.py).

Topic level: the same three under ``/admin/v2/persistent/{tenant}/{ns}/{topic}/``
with the same documents, kept with the topic's other policies
(``/admin/topic-policies/...``, per cluster like the namespace's) and shared
by the partitions of a partitioned topic. A non-persistent topic takes a
``publishRate`` of its own (``/admin/v2/non-persistent/...``); its dispatch is
never throttled, so it has no dispatch rates. A topic's rate overrides its
namespace's, even a -1 ("no limit") one, as in Pulsar; ``DELETE`` brings the
namespace's back. ``GET ...?applied=true`` answers the rate in force: the
topic's, else the namespace's, else the broker's default (204 when there is
none). Other brokers follow through their watch on the topic's policies node.
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import SERVICE, BadRequest, _json, _ns
from broker.http.policies import _existing_topic, _set_topic
from broker.security.authorization import Need, requires
from broker.topics.rate_limits import DISPATCH_RATE_FIELDS, PUBLISH_RATE_FIELDS, check_rate_document
from broker.topics.throttling import rate_for

routes = web.RouteTableDef()

# REST name -> (NamespacePolicies attribute, document shape, Pulsar's class name for messages)
RATE_POLICIES = {
    "publishRate": ("publish_max_message_rate", PUBLISH_RATE_FIELDS, "PublishRate"),
    "dispatchRate": ("topic_dispatch_rate", DISPATCH_RATE_FIELDS, "DispatchRate"),
    "subscriptionDispatchRate": ("subscription_dispatch_rate", DISPATCH_RATE_FIELDS, "DispatchRate"),
}


def _with_cluster_rate(rates: dict | None, cluster: str, rate: dict | None) -> dict | None:
    """A rate policy (Pulsar keeps one rate per cluster) with this cluster's rate replaced, or removed for None;
    None when no cluster has one left."""
    updated = {k: v for k, v in (rates or {}).items() if k != cluster}
    if rate is not None:
        updated[cluster] = rate
    return updated or None


async def _set(request, attr: str, rate: dict | None) -> None:
    """Store (or with None remove) this cluster's rate, then apply it to the namespace's loaded topics."""
    service, ns = request.app[SERVICE], _ns(request)
    cluster = service.config.cluster_name
    current = getattr(await service.resources.get_policies(ns), attr)
    policies = await service.resources.update_policies(ns, **{attr: _with_cluster_rate(current, cluster, rate)})
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == ns and not topic.closed:
            topic.apply_policies(policies)


def _register(name: str) -> None:
    path = f"/admin/v2/namespaces/{{tenant}}/{{ns}}/{name}"
    attr, shape, kind = RATE_POLICIES[name]

    @routes.post(path)
    @requires(Need.TENANT_ADMIN)
    async def set_rate(request):
        rate = await _body(request, shape, kind)
        await _set(request, attr, rate)
        return web.Response(status=204)

    @routes.get(path)
    @requires(Need.TENANT_ADMIN)
    async def get_rate(request):
        service = request.app[SERVICE]
        rates = getattr(await service.resources.get_policies(_ns(request)), attr) or {}
        rate = rates.get(service.config.cluster_name)
        if rate is None:
            return web.Response(status=204)  # Pulsar's answer for a rate that is not set
        return web.json_response(rate)

    @routes.delete(path)
    @requires(Need.TENANT_ADMIN)
    async def delete_rate(request):
        await _set(request, attr, None)
        return web.Response(status=204)


def _body(request, shape, kind):
    async def parse():
        try:
            return check_rate_document(await _json(request), shape, kind)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
    return parse()


for _name in RATE_POLICIES:
    _register(_name)


# ---- topic level --------------------------------------------------------------------------


def _broker_default(config, attr: str) -> dict | None:
    """The broker's default rate as a document (None when it sets none)."""
    if attr == "publish_max_message_rate":
        doc = {"publishThrottlingRateInMsg": config.max_publish_rate_per_topic_in_messages,
               "publishThrottlingRateInByte": config.max_publish_rate_per_topic_in_bytes}
        return doc if any(v > 0 for v in doc.values()) else None
    scope = "topic" if attr == "topic_dispatch_rate" else "subscription"
    msg, byte = (getattr(config, f"dispatch_throttling_rate_per_{scope}_in_{unit}") for unit in ("msg", "byte"))
    if msg <= 0 and byte <= 0:
        return None
    return {"dispatchThrottlingRateInMsg": msg, "dispatchThrottlingRateInByte": byte, "ratePeriodInSecond": 1,
            "relativeToPublishRate": config.dispatch_throttling_rate_relative_to_publish_rate}


async def _set_topic_rate(request, attr: str, rate: dict | None) -> None:
    """Store (or with None remove) this cluster's rate in the topic's policies; _set_topic applies it."""
    service, topic = await _existing_topic(request)
    cluster = service.config.cluster_name
    current = getattr(await service.resources.get_topic_policies(topic), attr)
    await _set_topic(request, {attr: _with_cluster_rate(current, cluster, rate)})


def _register_topic(name: str, domain: str) -> None:
    path = f"/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}/{name}"
    attr, shape, kind = RATE_POLICIES[name]

    @routes.post(path)
    @requires(Need.TENANT_ADMIN)
    async def set_rate(request):
        rate = await _body(request, shape, kind)
        await _set_topic_rate(request, attr, rate)
        return web.Response(status=204)

    @routes.get(path)
    @requires(Need.TENANT_ADMIN)
    async def get_rate(request):
        service, topic = await _existing_topic(request)
        cluster = service.config.cluster_name
        own = await service.resources.get_topic_policies(topic)
        if request.query.get("applied", "false").lower() != "true":
            rate = rate_for(cluster, attr, None, own)
        else:
            rate = rate_for(cluster, attr, await service.resources.get_policies(topic.namespace_name), own)
            if rate is None:
                rate = _broker_default(service.config, attr)
        return web.Response(status=204) if rate is None else web.json_response(rate)

    @routes.delete(path)
    @requires(Need.TENANT_ADMIN)
    async def delete_rate(request):
        await _set_topic_rate(request, attr, None)
        return web.Response(status=204)


for _name in RATE_POLICIES:
    _register_topic(_name, "persistent")
_register_topic("publishRate", "non-persistent")  # a non-persistent topic's sends are throttled; its dispatch is not
