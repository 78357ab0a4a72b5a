"""``/admin/v2/clusters``: Pulsar's cluster admin routes over ClusterData (broker/ownership/clusters.py).

``GET /admin/v2/clusters`` lists the names; ``GET/PUT/POST/DELETE /admin/v2/clusters/{cluster}`` read, create,
update and delete one, with Pulsar's statuses: 204 on success, 404 for a missing cluster, 409 for a PUT of one
that exists, 412 for an invalid name, 400 for a malformed body. The broker's own cluster exists from its start.
With authorization on, every one of them is a superuser's (Pulsar checks superuser access on its cluster routes).
"""

from __future__ import annotations

from aiohttp import web

from broker.http.admin import SERVICE, _json
from broker.ownership.clusters import ClusterData, Clusters
from broker.security.authorization import Need, requires

routes = web.RouteTableDef()


def _clusters(request) -> Clusters:
    return Clusters(request.app[SERVICE].store)


@routes.get("/admin/v2/clusters")
@requires(Need.SUPERUSER)
async def list_clusters(request):
    return web.json_response(await _clusters(request).names())


@routes.get("/admin/v2/clusters/{cluster}")
@requires(Need.SUPERUSER)
async def get_cluster(request):
    return web.json_response((await _clusters(request).get(request.match_info["cluster"])).to_json())


@routes.put("/admin/v2/clusters/{cluster}")
@requires(Need.SUPERUSER)
async def create_cluster(request):
    data = ClusterData.from_json(await _json(request, {}))
    await _clusters(request).create(request.match_info["cluster"], data)
    return web.Response(status=204)


@routes.post("/admin/v2/clusters/{cluster}")
@requires(Need.SUPERUSER)
async def update_cluster(request):
    data = ClusterData.from_json(await _json(request, {}))
    await _clusters(request).update(request.match_info["cluster"], data)
    return web.Response(status=204)


@routes.delete("/admin/v2/clusters/{cluster}")
@requires(Need.SUPERUSER)
async def delete_cluster(request):
    await _clusters(request).delete(request.match_info["cluster"])
    return web.Response(status=204)
