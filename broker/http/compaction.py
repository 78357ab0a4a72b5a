"""Compaction admin routes in Pulsar's shapes: trigger a run and read its status.

``PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/compaction`` starts a run
(204; 409 while one is running) and ``GET`` of the same path answers
``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": ...}``
(Pulsar's LongRunningProcessStatus), with what the last run did. On a
partitioned topic both act on every partition, each on the broker serving it
(broker/http/partitions.py; a partition already compacting is left running); the status
is the least finished one's (ERROR, then RUNNING, then NOT_RUN, then SUCCESS),
with each partition's own under ``partitions``.
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import _loaded, _service, _topic
from broker.http.partitions import each_partition, first_refusal
from broker.security.authorization import Need, requires

routes = web.RouteTableDef()
PATH = "/admin/v2/persistent/{tenant}/{ns}/{topic}/compaction"
_ORDER = ("ERROR", "RUNNING", "NOT_RUN", "SUCCESS")  # which partition's status the whole topic reports


@routes.put(PATH)
@requires(Need.TENANT_ADMIN)
async def trigger_compaction(request):
    service, name = _service(request), _topic(request)
    if await service.resources.partition_count(name) == 0:
        (await _loaded(request)).compaction.trigger()  # 409 with its reason while a run is going
        return web.Response(status=204)

    async def trigger(topic):
        if not topic.compaction.running:  # a partition already compacting is left running
            topic.compaction.trigger()

    answers = await each_partition(request, name, trigger, "PUT", "compaction")
    return first_refusal([a for a in answers if a[0] != 409]) or web.Response(status=204)


@routes.get(PATH)
@requires(Need.TENANT_ADMIN)
async def compaction_status(request):
    service, name = _service(request), _topic(request)
    if await service.resources.partition_count(name) == 0:
        return web.json_response((await _loaded(request)).compaction.status_json())

    async def status(topic):
        return topic.compaction.status_json()

    answers = await each_partition(request, name, status, "GET", "compaction")
    refused = first_refusal(answers)
    if refused is not None:
        return refused
    parts = {str(name.partition(i)): doc for i, (_, doc) in enumerate(answers)}
    worst = min(parts.values(), key=lambda s: _ORDER.index(s["status"]))
    errors = "; ".join(f"{n}: {s['lastError']}" for n, s in parts.items() if s["lastError"])
    return web.json_response({"status": worst["status"], "lastError": errors, "partitions": parts})
