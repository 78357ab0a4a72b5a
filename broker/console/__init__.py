"""The operator console: static pages served at ``/console`` and the read-only REST they add (docs/console.md).

The page is plain HTML, CSS and JavaScript from this package's ``static/`` folder (no build step, no CDN);
every number it shows comes from a documented REST endpoint, the existing ``/admin/v2`` routes or this
package's ``/admin/magnetar/v1`` ones (broker/console/rest.py), and every action it offers is an existing
admin route, so authorization applies to the console exactly as to the CLI.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from broker.console.rest import routes as rest_routes
from broker.security.authorization import Need, requires

STATIC_DIR = Path(__file__).parent / "static"
_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
static_routes = web.RouteTableDef()


@static_routes.get("/console")
@requires(Need.OPEN)
async def console_root(request):
    raise web.HTTPFound("/console/")


@static_routes.get("/console/{name:[A-Za-z0-9_.-]*}")
@requires(Need.OPEN)
async def console_file(request):
    """The console's files; only names that exist in static/ (the pattern refuses '/' and so '..')."""
    name = request.match_info["name"] or "index.html"
    path = STATIC_DIR / name
    if name.startswith(".") or path.suffix not in _TYPES or not path.is_file():
        raise web.HTTPNotFound(text=f'{{"reason": "no console file {name[:80]}"}}', content_type="application/json")
    return web.Response(body=path.read_bytes(), content_type=_TYPES[path.suffix], charset="utf-8",
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


routes = [*static_routes, *rest_routes]
