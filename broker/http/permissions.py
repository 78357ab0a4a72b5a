"""Who may call which admin route, and the routes that grant and revoke permissions (Pulsar's shapes).

Every route declares what it needs with ``@requires(Need.X)``
(broker/security/authorization.py); ``authorize`` is the middleware that
enforces it before the handler runs, for the role authentication put on the
request (else ``anonymous_user_role``), and answers 403 with the reason. A
route that declares nothing is refused while authorization is on, so a new
route cannot be open by omission (and a test walks every route for a
declaration). With authorization off the middleware only passes through.

``POST /admin/v2/tenants/{t}`` (a superuser) replaces a tenant's info, and so
its ``adminRoles``, as Pulsar's tenant update does.

Permission routes (all need a tenant admin or a superuser):
``POST/DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{role}`` (the body a
JSON array of actions), ``GET /admin/v2/namespaces/{t}/{ns}/permissions``
(``{role: [actions]}``), and the same under
``/admin/v2/persistent/{t}/{ns}/{topic}/permissions``, whose GET answers the
namespace's grants merged with the topic's, as Pulsar does.
"""

from __future__ import annotations

from aiohttp import web

from broker.errors import AuthorizationError
from broker.http.admin import SERVICE, _json, _ns, _service, _topic
from broker.ownership.resources import NotFoundError, TenantInfo, check_role, parse_actions
from broker.security.authorization import Need, refusal, request_role, requires
from broker.topics.names import check_segment

routes = web.RouteTableDef()


@web.middleware
async def authorize(request, handler):
    service = request.app[SERVICE]
    if not service.authorization.enabled or request.match_info.http_exception is not None:
        return await handler(request)  # off, or the router's own 404/405
    need = getattr(request.match_info.route.handler, "required_access", None)
    role = request_role(request, service.config)
    if need is None:
        raise AuthorizationError(f"{request.method} {request.path} declares no permission, so it is refused")
    if need in (Need.LOOKUP, Need.PRODUCE, Need.CONSUME):
        resource = _topic(request)
    elif need is Need.NAMESPACE_LOOKUP:
        resource = _ns(request)
    elif "tenant" in request.match_info:
        resource = check_segment("tenant", request.match_info["tenant"])
    else:
        resource = None
    if not await service.authorization.allowed(role, resource, need):
        if role is not None:
            await service.authorization.raise_if_missing(resource, need)
        raise AuthorizationError(refusal(role, need, resource if need is not Need.SUPERUSER else
                                         f"{request.method} {request.path}"))
    return await handler(request)


# ---- tenant admin roles -------------------------------------------------------------


@routes.post("/admin/v2/tenants/{tenant}")
@requires(Need.SUPERUSER)
async def update_tenant(request):
    body = await _json(request, {}) or {}
    await _service(request).resources.update_tenant(request.match_info["tenant"], TenantInfo.from_json(body))
    return web.Response(status=204)


# ---- namespace permissions ----------------------------------------------------------


@routes.get("/admin/v2/namespaces/{tenant}/{ns}/permissions")
@requires(Need.TENANT_ADMIN)
async def namespace_permissions(request):
    policies = await _service(request).resources.get_policies(_ns(request))
    return web.json_response((policies.auth_policies or {}).get("namespace_auth", {}))


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/permissions/{role}")
@requires(Need.TENANT_ADMIN)
async def grant_on_namespace(request):
    role, actions = check_role(request.match_info["role"]), parse_actions(await _json(request))

    def grant(auth: dict) -> dict:
        auth["namespace_auth"][role] = actions
        return auth

    await _service(request).resources.update_auth_policies(_ns(request), grant)
    return web.Response(status=204)


@routes.delete("/admin/v2/namespaces/{tenant}/{ns}/permissions/{role}")
@requires(Need.TENANT_ADMIN)
async def revoke_on_namespace(request):
    role = request.match_info["role"]

    def revoke(auth: dict) -> dict:
        auth["namespace_auth"].pop(role, None)  # Pulsar: revoking what was never granted is not an error
        return auth

    await _service(request).resources.update_auth_policies(_ns(request), revoke)
    return web.Response(status=204)


# ---- topic permissions --------------------------------------------------------------


@routes.get("/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions")
@requires(Need.TENANT_ADMIN)
async def topic_permissions(request):
    topic = _topic(request)
    auth = (await _service(request).resources.get_policies(_ns(request))).auth_policies or {}
    merged = {role: set(actions) for role, actions in auth.get("namespace_auth", {}).items()}
    for role, actions in auth.get("destination_auth", {}).get(str(topic), {}).items():
        merged.setdefault(role, set()).update(actions)
    return web.json_response({role: sorted(actions) for role, actions in merged.items()})


@routes.post("/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}")
@requires(Need.TENANT_ADMIN)
async def grant_on_topic(request):
    topic = str(_topic(request))
    role, actions = check_role(request.match_info["role"]), parse_actions(await _json(request))

    def grant(auth: dict) -> dict:
        auth["destination_auth"].setdefault(topic, {})[role] = actions
        return auth

    await _service(request).resources.update_auth_policies(_ns(request), grant)
    return web.Response(status=204)


@routes.delete("/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}")
@requires(Need.TENANT_ADMIN)
async def revoke_on_topic(request):
    topic, role = str(_topic(request)), request.match_info["role"]

    def revoke(auth: dict) -> dict:
        grants = auth["destination_auth"].get(topic, {})
        if role not in grants:
            raise NotFoundError(f"role {role!r} has no permissions of its own on topic {topic}")
        del grants[role]
        if not grants:
            del auth["destination_auth"][topic]
        return auth

    await _service(request).resources.update_auth_policies(_ns(request), revoke)
    return web.Response(status=204)
