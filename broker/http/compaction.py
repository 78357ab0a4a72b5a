"""Compaction admin routes in Pulsar's shapes: trigger a run and read its status.

``PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/compaction`` starts a run
(204; 409 while one is running) and ``GET`` of the same path answers
``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": ...}``
(Pulsar's LongRunningProcessStatus), with what the last run did.
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import SERVICE, _loaded
from broker.security.authorization import Need, requires

routes = web.RouteTableDef()
PATH = "/admin/v2/persistent/{tenant}/{ns}/{topic}/compaction"


@routes.put(PATH)
@requires(Need.TENANT_ADMIN)
async def trigger_compaction(request):
    topic = await _loaded(request)
    topic.compaction.trigger()
    return web.Response(status=204)


@routes.get(PATH)
@requires(Need.TENANT_ADMIN)
async def compaction_status(request):
    topic = await _loaded(request)
    return web.json_response(topic.compaction.status_json())


__all__ = ["routes", "SERVICE"]
