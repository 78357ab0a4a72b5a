"""``GET .../{topic}/partitioned-stats`` for persistent and non-persistent topics, in Pulsar's shape.

How it works: the partitions of one topic hash into different bundles, so behind several brokers (or the
workers of ``broker standalone``) they are served in different processes. Each partition's stats come from the
broker serving it: this broker's own from memory, another's by ``GET .../{partition}/stats`` on that broker
(broker/http/forwarding.py's ``ask_owner``), all asked at once. Sending the whole request on to one partition's
owner, as a single topic's request is, would not do: that broker would meet the next partition served elsewhere.
A partition nobody serves yet is loaded where its bundle is placed, as Pulsar's broker does when it asks.

The answer sums the counters and rates over the partitions (``metadata.partitions`` is the count) and, unless
``perPartition=false`` (Pulsar's default is true), carries each partition's own stats under ``partitions``.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from broker.errors import TopicServedElsewhereError
from broker.http.admin import _service
from broker.http.forwarding import ask_owner, topic_path
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics.names import parse_topic

routes = web.RouteTableDef()

SUMMED = ("msgInCounter", "msgOutCounter", "bytesInCounter", "msgBacklog", "msgRateIn", "msgRateOut",
          "msgThroughputIn", "msgThroughputOut")


async def partition_stats(request, service, name) -> tuple[int, object]:
    """One partition's stats, from this broker when it serves the partition, else from the broker that does:
    (200, stats) or (status, reason)."""
    try:
        topic = await service.get_topic(name, create=True)
    except TopicServedElsewhereError as exc:
        return await ask_owner(request, exc.owner, "GET", topic_path(name, "stats"))
    stats = topic.stats()
    return 200, service.topic_stats.add_rates(str(name), stats) if name.persistent else stats


async def _partitioned_stats(request, domain: str):
    service, m = _service(request), request.match_info
    topic = parse_topic(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")
    count = await service.resources.partition_count(topic)
    if count == 0:
        raise NotFoundError(f"partitioned topic {topic} does not exist")
    names = [topic.partition(i) for i in range(count)]
    answers = await asyncio.gather(*(partition_stats(request, service, n) for n in names))
    for status, reason in answers:
        if status != 200:
            return web.json_response({"reason": reason}, status=status)
    parts = {str(n): stats for n, (_, stats) in zip(names, answers)}
    total = {key: sum(p.get(key, 0) for p in parts.values()) for key in SUMMED}
    per_partition = request.query.get("perPartition", "true").lower() != "false"
    return web.json_response({"metadata": {"partitions": count}, **total, "partitions": parts if per_partition else {}})


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/partitioned-stats")
@requires(Need.TENANT_ADMIN)
async def persistent_partitioned_stats(request):
    return await _partitioned_stats(request, "persistent")


@routes.get("/admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitioned-stats")
@requires(Need.TENANT_ADMIN)
async def non_persistent_partitioned_stats(request):
    return await _partitioned_stats(request, "non-persistent")
