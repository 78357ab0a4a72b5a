"""Schema REST routes in Pulsar's shapes (``/admin/v2/schemas/...``) and the namespace schema policies.

A schema answers as ``{"version", "type", "timestamp", "data", "properties"}``
(Pulsar's GetSchemaResponse): ``data`` is the definition as text (base64 for a
binary one, e.g. PROTOBUF_NATIVE). POST takes Pulsar's PostSchemaPayload
``{"type", "schema", "properties"}``. DELETE writes a deletion marker (the
version numbering goes on, as in Pulsar); ``?force=true`` erases the history.
POST ``.../compatibility`` is a dry run answering ``{"isCompatibility",
"schemaCompatibilityStrategy", "reason"}``.

Namespace policies: ``schemaCompatibilityStrategy`` (PUT or POST a JSON
string), ``isAllowAutoUpdateSchema`` and ``schemaValidationEnforced`` (POST a
JSON boolean); GET answers each (UNDEFINED, true and false when unset).
"""

from __future__ import annotations

import base64
import json

from aiohttp import web

from broker.http.admin import BadRequest, _json, _ns, _service, _topic
from broker.ownership.resources import NotFoundError
from broker.schemas import MAX_DEFINITION_BYTES, SchemaInfo, StoredSchema
from broker.schemas.compatibility import parse_strategy
from broker.security.authorization import Need, requires

routes = web.RouteTableDef()
_BASE = "/admin/v2/schemas/{tenant}/{ns}/{topic}"


def schema_json(entry: StoredSchema) -> dict:
    try:
        data = entry.info.data.decode()
    except UnicodeDecodeError:
        data = base64.b64encode(entry.info.data).decode()
    return {"version": entry.version, "type": entry.info.type, "timestamp": entry.timestamp_ms, "data": data,
            "properties": entry.info.properties}


async def _payload(request) -> SchemaInfo:
    if request.content_length is not None and request.content_length > 2 * MAX_DEFINITION_BYTES:
        raise BadRequest(f"schema payload exceeds {2 * MAX_DEFINITION_BYTES} bytes")
    body = await _json(request)
    if not isinstance(body, dict) or not isinstance(body.get("type"), str) or not isinstance(body.get("schema", ""), str):
        raise BadRequest('expected {"type": "AVRO", "schema": "<definition>", "properties": {}}')
    return SchemaInfo(body["type"].upper(), body.get("schema", "").encode(), body.get("properties") or {})


def _version(request) -> int:
    text = request.match_info["version"]
    if not text.lstrip("-").isdigit() or not -1 <= int(text) < 2**63:
        raise BadRequest(f"schema version must be an integer, got {text!r}")
    return int(text)


def _missing(topic, version=None) -> NotFoundError:
    which = "" if version is None else f" version {version}"
    return NotFoundError(f"Schema not found: no schema{which} stored for {topic}")


@routes.get(_BASE + "/schema")
@requires(Need.TENANT_ADMIN)
async def get_schema(request):
    topic = _topic(request)
    entry = await _service(request).schemas.get(topic, None)
    if entry is None:
        raise _missing(topic)
    return web.json_response(schema_json(entry))


@routes.get(_BASE + "/schema/{version}")
@requires(Need.TENANT_ADMIN)
async def get_schema_version(request):
    topic, version = _topic(request), _version(request)
    entry = await _service(request).schemas.get(topic, None if version < 0 else version)
    if entry is None:
        raise _missing(topic, version)
    return web.json_response(schema_json(entry))


@routes.get(_BASE + "/schemas")
@requires(Need.TENANT_ADMIN)
async def get_all_schemas(request):
    from broker.schemas.registry import live

    entries = live(await _service(request).schemas.history(_topic(request)))
    return web.json_response({"getSchemaResponses": [schema_json(e) for e in entries]})


@routes.get(_BASE + "/versions")
@requires(Need.TENANT_ADMIN)
async def get_versions(request):
    from broker.schemas.registry import live

    return web.json_response([e.version for e in live(await _service(request).schemas.history(_topic(request)))])


@routes.post(_BASE + "/schema")
@requires(Need.TENANT_ADMIN)
async def post_schema(request):
    info = await _payload(request)
    version = await _service(request).schemas.register(_topic(request), info, from_client=False)
    return web.json_response({"version": version})


@routes.delete(_BASE + "/schema")
@requires(Need.TENANT_ADMIN)
async def delete_schema(request):
    force = request.query.get("force", "false").lower() == "true"
    topic = _topic(request)
    version = await _service(request).schemas.delete(topic, force=force)
    return web.json_response({"version": version})


@routes.post(_BASE + "/compatibility")
@requires(Need.TENANT_ADMIN)
async def test_compatibility(request):
    info = await _payload(request)
    ok, strategy, reason = await _service(request).schemas.test(_topic(request), info)
    return web.json_response({"isCompatibility": ok, "schemaCompatibilityStrategy": strategy.value, "reason": reason})


@routes.post(_BASE + "/version")
@requires(Need.TENANT_ADMIN)
async def version_of(request):
    topic, info = _topic(request), await _payload(request)
    version = await _service(request).schemas.version_of(topic, info)
    if version is None:
        raise NotFoundError(f"the schema is not one of {topic}'s versions")
    return web.json_response({"version": version})


# ---- namespace policies --------------------------------------------------------------------------------------

_NS = "/admin/v2/namespaces/{tenant}/{ns}/"


@routes.put(_NS + "schemaCompatibilityStrategy")
@routes.post(_NS + "schemaCompatibilityStrategy")
@requires(Need.TENANT_ADMIN)
async def set_strategy(request):
    body = await _json(request)
    strategy = parse_strategy(body)
    await _service(request).resources.update_policies(
        _ns(request), schema_compatibility_strategy=None if strategy is None else strategy.value)
    return web.Response(status=204)


@routes.get(_NS + "schemaCompatibilityStrategy")
@requires(Need.TENANT_ADMIN)
async def get_strategy(request):
    policies = await _service(request).resources.get_policies(_ns(request))
    return web.json_response(policies.schema_compatibility_strategy or "UNDEFINED")


_FLAGS = {"isAllowAutoUpdateSchema": ("is_allow_auto_update_schema", True),
          "schemaValidationEnforced": ("schema_validation_enforced", False)}


def _flag(request) -> tuple[str, bool]:
    return _FLAGS[request.match_info["flag"]]


@routes.post(_NS + "{flag:isAllowAutoUpdateSchema|schemaValidationEnforced}")
@requires(Need.TENANT_ADMIN)
async def set_flag(request):
    field, _ = _flag(request)
    value = await _json(request)
    if not isinstance(value, bool):
        raise BadRequest(f"{request.match_info['flag']} expects a JSON boolean, got {json.dumps(value)[:100]}")
    await _service(request).resources.update_policies(_ns(request), **{field: value})
    return web.Response(status=204)


@routes.get(_NS + "{flag:isAllowAutoUpdateSchema|schemaValidationEnforced}")
@requires(Need.TENANT_ADMIN)
async def get_flag(request):
    field, default = _flag(request)
    value = getattr(await _service(request).resources.get_policies(_ns(request)), field)
    return web.json_response(default if value is None else value)
