"""Admin REST and lookup for non-persistent topics (``/admin/v2/non-persistent/...``), in Pulsar's shapes.

A non-persistent topic is on record nowhere but in the memory of the broker
serving it, so its stats come from that broker: asked elsewhere, the request
goes to the owner of the topic's bundle (broker/http/forwarding.py); a topic
nobody serves is 404. ``partitioned-stats`` is broker/http/partitions.py. The namespace's list
(``GET .../{tenant}/{ns}``) gathers every broker's (broker/ownership/non_persistent_listing.py);
``GET .../{tenant}/{ns}/{bundle}`` (Pulsar's getListInBundle) answers this
broker's own in one bundle, which is what the others ask.

Partitioned non-persistent topics are on record like persistent ones
(``/admin/partitioned-topics/<t>/<ns>/non-persistent/<topic>``):
``PUT``/``POST``/``GET``/``DELETE .../{topic}/partitions`` and
``GET .../{tenant}/{ns}/partitioned``; each partition is a non-persistent topic
of its own, loaded where its name hashes.
"""

from __future__ import annotations

from aiohttp import web

from broker.errors import NotAllowedError, TopicServedElsewhereError
from broker.http.admin import BadRequest, _json, _ns, _service
from broker.http.lookup import answer_lookup
from broker.ownership.bundles import parse_bundle_name
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics.names import parse_topic
from broker.ownership.non_persistent_listing import local_topics_in_bundle, topics_of_namespace

routes = web.RouteTableDef()
NS = "/admin/v2/non-persistent/{tenant}/{ns}"


def _topic(request):
    m = request.match_info
    return parse_topic(f"non-persistent://{m['tenant']}/{m['ns']}/{m['topic']}")


@routes.get(NS)
@requires(Need.TENANT_ADMIN)
async def list_topics(request):
    service, ns = _service(request), _ns(request)
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    return web.json_response(await topics_of_namespace(service, ns))


@routes.get(NS + "/partitioned")
@requires(Need.TENANT_ADMIN)
async def list_partitioned(request):
    service = _service(request)
    return web.json_response([str(t) for t in await service.resources.partitioned_topics(_ns(request), "non-persistent")])


@routes.get(NS + "/{bundle}")
@requires(Need.TENANT_ADMIN)
async def list_in_bundle(request):
    """The non-persistent topics this broker serves in one bundle of the namespace (what other brokers ask)."""
    bundle = parse_bundle_name(request.match_info["bundle"])  # 412 for a malformed range
    return web.json_response(local_topics_in_bundle(_service(request), _ns(request), bundle))


def _partitions(body) -> int:
    if not isinstance(body, int) or isinstance(body, bool):
        raise BadRequest("the body must be the number of partitions")
    return body


@routes.put(NS + "/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def create_partitioned(request):
    service, topic = _service(request), _topic(request)
    partitions = _partitions(await _json(request))
    await service.resources.get_policies(topic.namespace_name)
    loaded = service.non_persistent.get(str(topic))
    if loaded is not None and not loaded.closed:
        raise NotAllowedError(f"a non-partitioned topic {topic} is in use")
    await service.create_partitioned_topic(topic, partitions)
    return web.Response(status=204)


@routes.post(NS + "/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def update_partitioned(request):
    partitions = _partitions(await _json(request))
    await _service(request).create_partitioned_topic(_topic(request), partitions, update=True)
    return web.Response(status=204)


@routes.get(NS + "/{topic}/partitions")
@requires(Need.LOOKUP)
async def get_partitions(request):
    return web.json_response({"partitions": await _service(request).resources.partition_count(_topic(request))})


@routes.delete(NS + "/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def delete_partitioned(request):
    """Forget the partitioned topic; its partitions served here are closed (their clients look them up again and
    find them gone). A partition another broker serves goes when its last client leaves or its bundle unloads."""
    service, topic = _service(request), _topic(request)
    count = await service.resources.partition_count(topic)
    if count == 0:
        raise NotFoundError(f"partitioned topic {topic} does not exist")
    await service.resources.delete_partitioned_topic(topic)
    for i in range(count):
        loaded = service.non_persistent.get(str(topic.partition(i)))
        if loaded is not None and not loaded.closed:
            await loaded.close(notify=True)
    return web.Response(status=204)


async def served_here(service, topic):
    """The non-persistent topic as this broker serves it. A partition of a partitioned topic is on record, so it
    is loaded on first ask like a persistent one; another topic exists only where a client uses it. Raises
    TopicServedElsewhereError when the topic's bundle is another broker's (the request goes there,
    broker/http/forwarding.py), NotFoundError when nobody serves it."""
    loaded = service.non_persistent.get(str(topic))
    if loaded is not None and not loaded.closed:
        return loaded
    if topic.partition_index >= 0 and await service.resources.partition_count(topic.partitioned_name) > 0:
        return await service.get_topic(topic, create=True)
    owner = await service.ownership.owner_of(topic)
    if owner is not None and owner.broker_id != service.ownership.me.broker_id:
        raise TopicServedElsewhereError(f"topic {topic} is served by broker {owner.broker_id}", owner)
    raise NotFoundError(f"topic {topic} is not served by any broker (a non-persistent topic exists only while a "
                        f"producer or consumer uses it)")


@routes.get("/admin/v2/non-persistent/{tenant}/{ns}/{topic}/stats")
@requires(Need.TENANT_ADMIN)
async def topic_stats(request):
    return web.json_response((await served_here(_service(request), _topic(request))).stats())


@routes.delete(NS + "/{topic}")
@requires(Need.TENANT_ADMIN)
async def delete_topic(request):
    """Close the topic and forget it (what deleting a topic kept in memory means); refused (405) while producers or
    consumers are connected unless ``?force=true``, which disconnects them."""
    service, topic = _service(request), _topic(request)
    loaded = await served_here(service, topic)
    await loaded.delete(force=request.query.get("force", "false").lower() == "true")
    if service.non_persistent.get(str(topic)) is loaded:
        service.non_persistent.pop(str(topic))
    return web.Response(status=204)


@routes.get("/lookup/v2/topic/non-persistent/{tenant}/{ns}/{topic}")
@requires(Need.LOOKUP)
async def lookup(request):
    return await answer_lookup(request, _service(request), _topic(request))
