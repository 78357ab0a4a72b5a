"""Authentication of HTTP requests (admin REST, lookup, metrics): the role goes to ``request[HTTP_ROLE_KEY]`` (broker.security.authorization).

With authentication on, a request proves its role with ``Authorization: Bearer <token>``, ``Authorization:
Basic <base64 user:password>``, or (over https, with the tls provider on) its client certificate; one with
none gets the anonymous role when ``anonymous_user_role`` is set. Anything else is answered 401 with a JSON
``{"reason": ...}`` saying what was wrong, and the route never runs.

Open without credentials, as in Pulsar:
* ``/health`` — liveness for load balancers and process supervisors; it says "OK" and nothing else. (Pulsar's
  own ``/admin/v2/brokers/health`` runs a produce/consume check and needs a role; ours does too.)
* ``/metrics`` — unless ``authenticate_metrics_endpoint`` (Pulsar's authenticateMetricsEndpoint, default off).
* ``/console`` and its static files — the operator console's page holds no data: every request it then makes
  carries the token typed into it, and is authenticated like any other. (Refused, a browser could never load
  the page to type one in.)

With authentication off, every request passes with role None.
"""

from __future__ import annotations

import logging

from aiohttp import web

from broker.errors import AuthenticationError
from broker.security.authorization import HTTP_ROLE_KEY as AUTH_ROLE

log = logging.getLogger(__name__)
ALWAYS_OPEN = frozenset({"/health", "/console"})
CONSOLE_FILES = "/console/"


def _service(request):
    from broker.http.admin import SERVICE

    return request.app[SERVICE]


def needs_credentials(path: str, authenticate_metrics: bool) -> bool:
    if path in ALWAYS_OPEN or path.startswith(CONSOLE_FILES):
        return False
    if path == "/metrics" or path.startswith("/metrics/"):
        return authenticate_metrics
    return True


@web.middleware
async def authenticate(request, handler):
    service = _service(request)
    authentication = getattr(service, "authentication", None)
    request[AUTH_ROLE] = None
    if authentication is None or not authentication.enabled or \
            not needs_credentials(request.path, service.config.authenticate_metrics_endpoint):
        return await handler(request)
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
    try:
        result = await authentication.authenticate_http(request.headers.get("Authorization"), ssl_object)
    except AuthenticationError as exc:
        log.info("HTTP %s %s from %s refused: %s", request.method, request.path, request.remote, exc)
        return web.json_response({"reason": f"authentication failed: {exc}"}, status=exc.http_status,
                                 headers={"WWW-Authenticate": 'Bearer realm="pulsar", Basic realm="pulsar"'})
    request[AUTH_ROLE] = result.role
    return await handler(request)
