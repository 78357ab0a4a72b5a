"""The bookie's HTTP endpoint (default port 8000): health, Prometheus metrics, info, read-only switch.

    GET  /health                      200 "OK" while serving, 503 and the reason otherwise
    GET  /metrics                     Prometheus text from this bookie's own registry
    GET  /api/v1/bookie/info          {"bookie_id", "state", "zone", "network_location", ...}
    PUT  /api/v1/bookie/state/readonly   {"readOnly": true|false|null}  (BookKeeper's shape; null clears)
    GET/PUT /api/v1/bookie/faults     {"fsyncDelayMs": 0..30000, "fsyncError": "ENOSPC"|null} -- only in a
                                      bookie started in fault-injection mode (storage/bookie/faults.py)

Every request that is not a GET/HEAD changes state and passes ``admin_access``
first: with ``http_admin_token`` configured it needs ``Authorization: Bearer
<token>`` (none: 401, another: 403); without one only loopback peers may
change state (what a standalone bookie on 127.0.0.1 needs), others get 403.
GETs stay open, as health checks and Prometheus scrapers expect.

The app's one collaborator is the service object under ``SERVICE`` (its
``health()``, ``registry``, ``refresh_gauges()``, ``info()`` and
``force_read_only()``), so a test can serve a stand-in. Each bookie has its
own registry: several bookies in one process (standalone) never mix metrics.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from storage.errors import StorageError


SERVICE = web.AppKey("service", object)
ADMIN_TOKEN = web.AppKey("admin_token", object)
_READ_ONLY_METHODS = frozenset({"GET", "HEAD"})


def admin_access(token: str | None, authorization: str | None, peer: str | None) -> tuple[int, str] | None:
    """None when a state-changing request may proceed, else (HTTP status, why).

    ``token``: the configured admin token (None: not configured); ``authorization``: the request's
    Authorization header; ``peer``: the client's IP address.
    """
    if token is None:
        if peer is not None and _is_loopback(peer):
            return None
        return 403, ("this bookie changes state over HTTP only for loopback clients; "
                     "set http_admin_token to allow others with a bearer token")
    if not authorization:
        return 401, "state-changing requests need 'Authorization: Bearer <token>'"
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return 401, "the Authorization header must be 'Bearer <token>'"
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        return 403, "wrong admin token"
    return None


def _is_loopback(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a unix socket or something unparseable: not provably local


@web.middleware
async def _guard_state_changes(request: web.Request, handler):
    if request.method not in _READ_ONLY_METHODS:
        refused = admin_access(request.app[ADMIN_TOKEN], request.headers.get("Authorization"), request.remote)
        if refused is not None:
            status, why = refused
            headers = {"WWW-Authenticate": 'Bearer realm="bookie"'} if status == 401 else None
            return web.json_response({"error": why}, status=status, headers=headers)
    return await handler(request)


async def start_http(service, host: str, port: int, admin_token: str | None = None) -> web.AppRunner:
    """Serve ``service`` on host:port; ``admin_token`` guards the state-changing endpoints (``admin_access``)."""
    app = web.Application(middlewares=[_guard_state_changes])
    app[SERVICE] = service
    app[ADMIN_TOKEN] = admin_token
    app.add_routes([
        web.get("/health", _health),
        web.get("/metrics", _metrics),
        web.get("/api/v1/bookie/info", _info),
        web.put("/api/v1/bookie/state/readonly", _set_read_only),
    ])
    if getattr(service, "journal_faults", None) is not None:
        app.add_routes([web.get("/api/v1/bookie/faults", _get_faults), web.put("/api/v1/bookie/faults", _set_faults)])
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


async def _get_faults(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].journal_faults.switches())


async def _set_faults(request: web.Request) -> web.Response:
    faults = request.app[SERVICE].journal_faults
    try:
        body = await request.json()
        delay_ms = body.get("fsyncDelayMs", 0)
        error = body.get("fsyncError")
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)):
            raise ValueError("fsyncDelayMs must be a number of milliseconds")
        if error is not None and (not isinstance(error, str) or not hasattr(errno, error)):
            raise ValueError("fsyncError must be an errno name such as \"ENOSPC\", or null")
        faults.set_switches(delay_ms / 1000, getattr(errno, error) if error is not None else None)
    except (ValueError, AttributeError, TypeError) as exc:
        return web.json_response({"error": f"bad fault switches: {exc}"}, status=400)
    return web.json_response(faults.switches())
