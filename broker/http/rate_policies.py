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
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import SERVICE, BadRequest, _json, _ns
from broker.security.authorization import Need, requires
from broker.topics.rate_limits import DISPATCH_RATE_FIELDS, PUBLISH_RATE_FIELDS, check_rate_document

routes = web.RouteTableDef()

# REST name -> (NamespacePolicies attribute, document shape, Pulsar's class name for messages)
RATE_POLICIES = {
    "publishRate": ("publish_max_message_rate", PUBLISH_RATE_FIELDS, "PublishRate"),
    "dispatchRate": ("topic_dispatch_rate", DISPATCH_RATE_FIELDS, "DispatchRate"),
    "subscriptionDispatchRate": ("subscription_dispatch_rate", DISPATCH_RATE_FIELDS, "DispatchRate"),
}


async def _set(request, attr: str, rate: dict | None) -> None:
    """Store (or with None remove) this cluster's rate, then apply it to the namespace's loaded topics."""
    service, ns = request.app[SERVICE], _ns(request)
    cluster = service.config.cluster_name
    current = getattr(await service.resources.get_policies(ns), attr) or {}
    updated = {k: v for k, v in current.items() if k != cluster}
    if rate is not None:
        updated[cluster] = rate
    policies = await service.resources.update_policies(ns, **{attr: updated or None})
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == ns and not topic.closed:
            topic.apply_policies(policies)


def _register(name: str) -> None:
    path = f"/admin/v2/namespaces/{{tenant}}/{{ns}}/{name}"
    attr, shape, kind = RATE_POLICIES[name]

    @routes.post(path)
    @requires(Need.TENANT_ADMIN)
    async def set_rate(request):
        body = await _json(request)
        try:
            rate = check_rate_document(body, shape, kind)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
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


for _name in RATE_POLICIES:
    _register(_name)
