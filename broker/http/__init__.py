"""The broker's HTTP server (port 8080): health, Prometheus metrics, admin REST and lookup in Pulsar's shapes."""

from __future__ import annotations

from aiohttp import web

from broker.http import permissions
from broker.http.admin import SERVICE, routes
from broker.http.clusters import routes as cluster_routes


def build_app(service) -> web.Application:
    app = web.Application(middlewares=[_errors, permissions.authorize])
    app[SERVICE] = service
    app.add_routes(permissions.routes)  # first: .../{ns}/permissions would otherwise match .../{ns}/{policy}
    app.add_routes(routes)
    app.add_routes(cluster_routes)
    return app


async def start_http(service, host: str, port: int) -> web.AppRunner:
    app = build_app(service)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner


@web.middleware
async def _errors(request, handler):
    from broker.http.admin import error_response

    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        if exc.content_type == "application/json":  # a handler's own answer
            raise
        # The router's: say so in the same JSON shape as every other admin error.
        what = "no such path" if exc.status == 404 else "method not allowed on"
        return web.json_response({"reason": f"{what} {request.method} {request.path}"}, status=exc.status)
    except web.HTTPException:
        raise
    except Exception as exc:
        return error_response(exc)
