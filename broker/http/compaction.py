"""Compaction admin routes in Pulsar's shapes: trigger a run and read its status.

``PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/compaction`` starts a run
(204; 409 while one is running) and ``GET`` of the same path answers
``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": ...}``
(Pulsar's LongRunningProcessStatus), with what the last run did. On a
partitioned topic both act on every partition (this broker's); the status
is the least finished one's (ERROR, then RUNNING, then NOT_RUN, then SUCCESS),
with each partition's own under ``partitions``.
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import _loaded, _service, _topic
from broker.security.authorization import Need, requires

routes = web.RouteTableDef()
PATH = "/admin/v2/persistent/{tenant}/{ns}/{topic}/compaction"
_ORDER = ("ERROR", "RUNNING", "NOT_RUN", "SUCCESS")  # which partition's status the whole topic reports


async def _topics(request) -> list:
    service, name = _service(request), _topic(request)
    count = await service.resources.partition_count(name)
    if count == 0:
        return [await _loaded(request)]
    return [await service.get_topic(name.partition(i), create=True) for i in range(count)]


@routes.put(PATH)
@requires(Need.TENANT_ADMIN)
async def trigger_compaction(request):
    topics = await _topics(request)
    running = [str(t.name) for t in topics if t.compaction.running]
    if running and len(topics) == 1:
        topics[0].compaction.trigger()  # raises the 409 with its reason
    for topic in topics:
        if not topic.compaction.running:
            topic.compaction.trigger()
    return web.Response(status=204)


@routes.get(PATH)
@requires(Need.TENANT_ADMIN)
async def compaction_status(request):
    topics = await _topics(request)
    if len(topics) == 1 and topics[0].name.partition_index < 0:
        return web.json_response(topics[0].compaction.status_json())
    parts = {str(t.name): t.compaction.status_json() for t in topics}
    worst = min(parts.values(), key=lambda s: _ORDER.index(s["status"]))
    errors = "; ".join(f"{name}: {s['lastError']}" for name, s in parts.items() if s["lastError"])
    return web.json_response({"status": worst["status"], "lastError": errors, "partitions": parts})
