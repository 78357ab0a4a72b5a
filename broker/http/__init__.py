"""The broker's HTTP server (port 8080): health, Prometheus metrics, admin REST and lookup in Pulsar's shapes."""

from __future__ import annotations

from aiohttp import web

from broker.http import permissions
from broker.http.admin import SERVICE, routes
from broker.http.auth_middleware import authenticate
from broker.http.clusters import routes as cluster_routes
from broker.http.compaction import routes as compaction_routes
from broker.http.console import routes as console_routes
from broker.http.forwarding import to_owner
from broker.http.non_persistent import routes as non_persistent_routes
from broker.http.partitions import routes as partition_routes
from broker.http.policies import routes as policy_routes
from broker.http.rate_policies import routes as rate_routes
from broker.http.schemas import routes as schema_routes
from broker.http.subscriptions import routes as subscription_routes
from broker.http.topic_admin import broker_routes, routes as topic_admin_routes


def build_app(service) -> web.Application:
    app = web.Application(middlewares=[_errors, authenticate, permissions.authorize, to_owner])
    app[SERVICE] = service
    app.add_routes(permissions.routes)  # first: .../{ns}/permissions would otherwise match .../{ns}/{policy}
    app.add_routes(schema_routes)  # before admin's too: .../{ns}/schemaCompatibilityStrategy and the like
    app.add_routes(rate_routes)  # likewise .../{ns}/publishRate and the other rates
    app.add_routes(policy_routes)  # likewise .../{ns}/messageTTL, backlogQuota, ...
    app.add_routes(topic_admin_routes)  # .../{ns}/unload and .../{ns}/topics before .../{ns}/{policy}
    app.add_routes(routes)
    app.add_routes(broker_routes)
    app.add_routes(cluster_routes)
    app.add_routes(compaction_routes)
    app.add_routes(non_persistent_routes)
    app.add_routes(partition_routes)
    app.add_routes(subscription_routes)
    app.add_routes(console_routes)
    return app


async def start_http(service, host: str, port: int | None, https_port: int | None = None) -> web.AppRunner:
    """The HTTP server on ``port`` (None: no plain http) and https on ``https_port`` (with the service's TLS
    context); both serve the same routes. ``listening_ports(runner)`` says what was bound (for port 0)."""
    app = build_app(service)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        if port is not None:
            await web.TCPSite(runner, host, port, reuse_address=True).start()
        if https_port is not None:
            if service.ssl_context is None:
                raise ValueError("https_port needs the TLS settings (certificate and key)")
            await web.TCPSite(runner, host, https_port, reuse_address=True, ssl_context=service.ssl_context).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def listening_ports(runner: web.AppRunner) -> tuple[int | None, int | None]:
    """(http port, https port) as bound; None for a listener that is off."""
    http = https = None
    for site in runner.sites:
        if site.name.startswith("https:"):
            https = site.port
        else:
            http = site.port
    return http, https


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
