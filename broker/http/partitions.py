"""Admin requests on a partitioned topic act on each of its partitions, each on the broker serving it.

How it works: the partitions of one topic hash into different bundles, so behind several brokers (or the
workers of ``broker standalone``) they are served in different processes. ``on_topic`` runs an operation on the
topic in the URL; when that topic is partitioned it runs it on every partition at once: in memory on this
broker's partitions, and as the partition's own route (``.../{topic}-partition-{i}/...``, same method, body and
query) asked of the broker serving each other one (broker/http/forwarding.py's ``ask_owner``), as Pulsar's
broker does with its admin client. Sending the whole request on to one partition's owner, as a single topic's
request is, would not do: that broker would meet the next partition served elsewhere. A partition nobody
serves yet is loaded where its bundle is placed. The first refusal ends the request with its status (the other
partitions are done or doing).

``GET .../{topic}/partitioned-stats`` is here too: it sums the counters and rates over the partitions
(``metadata.partitions`` is the count) and, unless ``perPartition=false`` (Pulsar's default is true), carries
each partition's own stats under ``partitions``; and ``GET .../{topic}/partitioned-internalStats``, each
partition's internal stats. ``DELETE .../{topic}/partitions`` deletes each partition where it is served.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Iterable

from aiohttp import web

from broker.errors import TopicServedElsewhereError
from broker.http.admin import SERVICE, _loaded
from broker.http.forwarding import ask_owner, topic_path
from broker.http.non_persistent import served_here
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics.names import parse_topic

routes = web.RouteTableDef()

SUMMED = ("msgInCounter", "msgOutCounter", "bytesInCounter", "msgBacklog", "msgRateIn", "msgRateOut",
          "msgThroughputIn", "msgThroughputOut")

Local = Callable[[object], Awaitable[object]]


def url_topic(request, domain: str = "persistent"):
    m = request.match_info
    return parse_topic(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")


def in_both_domains(table: web.RouteTableDef, method: str, suffix: str, need: Need = Need.TENANT_ADMIN):
    """Register ``handler(request, domain)`` as ``method /admin/v2/<domain>/{tenant}/{ns}/{topic}<suffix>`` for
    ``persistent`` and ``non-persistent`` alike."""
    def register(handler):
        for domain in ("persistent", "non-persistent"):
            async def route(request, domain=domain):
                return await handler(request, domain)

            table.route(method, f"/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}{suffix}")(requires(need)(route))
        return handler

    return register


PARTS_IN_FLIGHT = 32  # partitions (or bundles) acted on at once: each may be a request to another broker


async def each_at_once(parts: Iterable[Awaitable[tuple[int, object]]]) -> list[tuple[int, object]]:
    """Await ``parts`` (a partition's or a bundle's step each), ``PARTS_IN_FLIGHT`` at a time; answers in order."""
    gate = asyncio.Semaphore(PARTS_IN_FLIGHT)

    async def gated(part):
        async with gate:
            return await part

    return list(await asyncio.gather(*map(gated, parts)))


async def here_or_at_owner(request, name, here: Callable[[], Awaitable[object]], method: str,
                           action: str) -> tuple[int, object]:
    """``here()`` when this broker serves topic ``name``: (200, its result); when ``here`` finds another broker
    serves it (TopicServedElsewhereError), ``method`` of the topic's ``action`` route asked of that broker, with
    this request's body and query: (its status, its answer or reason)."""
    try:
        return 200, await here()
    except TopicServedElsewhereError as exc:
        query = f"?{request.query_string}" if request.query_string else ""
        return await ask_owner(request, exc.owner, method, topic_path(name, action) + query, await request.read())


async def each_partition(request, base, local: Local, method: str, action: str) -> list[tuple[int, object]]:
    """``local(partition topic)`` on each partition this broker serves (loading it if nobody does), ``method
    .../{partition}/{action}`` on the broker serving each other one: (status, answer or reason) per partition,
    in partition order."""
    service = request.app[SERVICE]
    count = await service.resources.partition_count(base)

    def on(name):
        async def here():
            return await local(await service.get_topic(name, create=True))
        return here_or_at_owner(request, name, here, method, action)

    return await each_at_once(on(base.partition(i)) for i in range(count))


def first_refusal(answers) -> web.Response | None:
    """The first refusal among (status, answer or reason) parts as this request's answer; None when every part
    was done."""
    for status, reason in answers:
        if status >= 300:
            return web.json_response({"reason": reason}, status=status)
    return None


def _answer(value) -> web.Response:
    return web.Response(status=204) if value is None else web.json_response(value)


async def on_topic(request, local: Local, method: str, action: str, *, combine: Callable[[list], object] | None = None,
                   create: bool = False, domain: str = "persistent") -> web.Response:
    """``local(topic)`` on the topic in the URL (a persistent one loaded, or with ``create`` created; a
    non-persistent one where it is served), its result as the answer (204 for None); on a partitioned topic, on
    every partition (``each_partition``), the answer ``combine`` of their results (204 without ``combine``)."""
    service, base = request.app[SERVICE], url_topic(request, domain)
    if await service.resources.partition_count(base) == 0:
        if not base.persistent:
            topic = await served_here(service, base)
        else:
            topic = await service.get_topic(base, create=True) if create else await _loaded(request)
        return _answer(await local(topic))
    answers = await each_partition(request, base, local, method, action)
    refused = first_refusal(answers)
    if refused is not None:
        return refused
    return _answer(combine([doc for _, doc in answers]) if combine else None)


# ---- partitioned-stats ----------------------------------------------------------------------------------------


@in_both_domains(routes, "GET", "/partitioned-stats")
async def partitioned_stats(request, domain: str):
    service, topic = request.app[SERVICE], url_topic(request, domain)
    count = await service.resources.partition_count(topic)
    if count == 0:
        raise NotFoundError(f"partitioned topic {topic} does not exist")

    async def stats(partition) -> dict:
        doc = partition.stats()
        return service.topic_stats.add_rates(str(partition.name), doc) if partition.name.persistent else doc

    answers = await each_partition(request, topic, stats, "GET", "stats")
    refused = first_refusal(answers)
    if refused is not None:
        return refused
    parts = {str(topic.partition(i)): doc for i, (_, doc) in enumerate(answers)}
    total = {key: sum(p.get(key, 0) for p in parts.values()) for key in SUMMED}
    per_partition = request.query.get("perPartition", "true").lower() != "false"
    return web.json_response({"metadata": {"partitions": count}, **total, "partitions": parts if per_partition else {}})


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitioned-internalStats")
@requires(Need.TENANT_ADMIN)
async def partitioned_internal_stats(request):
    """Pulsar's PartitionedTopicInternalStats: ``{"metadata": {"partitions": N}, "partitions": {name: the
    partition's internalStats}}``."""
    service, topic = request.app[SERVICE], url_topic(request)
    count = await service.resources.partition_count(topic)
    if count == 0:
        raise NotFoundError(f"partitioned topic {topic} does not exist")

    async def internal_stats(partition) -> dict:
        return partition.internal_stats()

    answers = await each_partition(request, topic, internal_stats, "GET", "internalStats")
    return first_refusal(answers) or web.json_response({
        "metadata": {"partitions": count},
        "partitions": {str(topic.partition(i)): doc for i, (_, doc) in enumerate(answers)}})


@routes.delete("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitions")
@requires(Need.TENANT_ADMIN)
async def delete_partitioned(request):
    """Delete every partition, each by the broker serving it (``?force=true`` goes with it), then the partitioned
    topic's record, its policies and its schema. A partition that refuses (clients connected, no force) ends the
    request with its status, and the partitioned topic stays on record."""
    service, topic = request.app[SERVICE], url_topic(request)
    count = await service.resources.partition_count(topic)
    if count == 0:
        raise NotFoundError(f"partitioned topic {topic} does not exist")
    force = request.query.get("force", "false").lower() == "true"

    def delete(name):
        async def here():
            if await service.factory.exists(name.managed_ledger_name):
                await service.delete_topic(name, force=force)
        return here_or_at_owner(request, name, here, "DELETE", "")

    refused = first_refusal(await each_at_once(delete(topic.partition(i)) for i in range(count)))
    if refused is not None:
        return refused
    await service.resources.delete_partitioned_topic(topic)
    await service.resources.delete_topic_policies(topic)
    await service.schemas.delete(topic, force=True)  # as Pulsar does: a topic made again starts without a schema
    return web.Response(status=204)
