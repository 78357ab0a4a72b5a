"""The bookie's HTTP endpoint (default port 8000): health, Prometheus metrics, info, read-only switch.

    GET  /health                      200 "OK" while serving, 503 and the reason otherwise
    GET  /metrics                     Prometheus text from this bookie's own registry
    GET  /api/v1/bookie/info          {"bookie_id", "state", "zone", "network_location", ...}
    PUT  /api/v1/bookie/state/readonly   {"readOnly": true|false|null}  (BookKeeper's shape; null clears)

The app's one collaborator is the service object under ``SERVICE`` (its
``health()``, ``registry``, ``refresh_gauges()``, ``info()`` and
``force_read_only()``), so a test can serve a stand-in. Each bookie has its
own registry: several bookies in one process (standalone) never mix metrics.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from storage.errors import StorageError


SERVICE = web.AppKey("service", object)


async def start_http(service, host: str, port: int) -> web.AppRunner:
    app = web.Application()
    app[SERVICE] = service
    app.add_routes([
        web.get("/health", _health),
        web.get("/metrics", _metrics),
        web.get("/api/v1/bookie/info", _info),
        web.put("/api/v1/bookie/state/readonly", _set_read_only),
    ])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner


async def _health(request: web.Request) -> web.Response:
    healthy, why = request.app[SERVICE].health()
    return web.Response(status=200 if healthy else 503, text=why)


async def _metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    service.refresh_gauges()
    return web.Response(body=generate_latest(service.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _info(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].info())


async def _set_read_only(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        value = body["readOnly"]
        if value is not None and not isinstance(value, bool):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'body must be {"readOnly": true | false | null}'}, status=400)
    try:
        await request.app[SERVICE].force_read_only(value)
    except StorageError as exc:  # re-registering needs the metadata store
        return web.json_response({"error": f"could not change the bookie's state: {exc}"}, status=503)
    return web.json_response(request.app[SERVICE].info())
