"""Admin REST and lookup for non-persistent topics (``/admin/v2/non-persistent/...``), in Pulsar's shapes.

A non-persistent topic is on record nowhere but in the memory of the broker
serving it, so its list and its stats come from that broker: one that does not
serve the topic answers 404 (lookup names the one that does).
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import _ns, _service
from broker.http.lookup import lookup_answer, lookup_redirect
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics.names import parse_topic

routes = web.RouteTableDef()


def _topic(request):
    m = request.match_info
    return parse_topic(f"non-persistent://{m['tenant']}/{m['ns']}/{m['topic']}")


@routes.get("/admin/v2/non-persistent/{tenant}/{ns}")
@requires(Need.TENANT_ADMIN)
async def list_topics(request):
    return web.json_response(_service(request).non_persistent_topics_of(_ns(request)))


@routes.get("/admin/v2/non-persistent/{tenant}/{ns}/{topic}/stats")
@requires(Need.TENANT_ADMIN)
async def topic_stats(request):
    topic = _topic(request)
    loaded = _service(request).non_persistent.get(str(topic))
    if loaded is None or loaded.closed:
        raise NotFoundError(f"topic {topic} is not served by this broker (a non-persistent topic exists only "
                            f"while a producer or consumer uses it; look it up to find its broker)")
    return web.json_response(loaded.stats())


@routes.get("/lookup/v2/topic/non-persistent/{tenant}/{ns}/{topic}")
@requires(Need.LOOKUP)
async def lookup(request):
    service = _service(request)
    broker, owns = await service.lookup(_topic(request), request.query.get("authoritative", "false").lower() == "true")
    listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
    if not owns:
        raise web.HTTPTemporaryRedirect(lookup_redirect(broker, request.path, listener, request.secure))
    return web.json_response(lookup_answer(broker, listener))
