"""A topic's subscriptions in Pulsar's REST shapes: list, create, delete, and reset a cursor.

``GET .../{topic}/subscriptions``, ``PUT``/``DELETE .../subscription/{sub}`` (a create takes an optional
message id to start at; else the end), ``POST .../subscription/{sub}/resetcursor/{timestamp}`` and
``POST .../resetcursor`` with a message id; for a non-persistent topic (``/admin/v2/non-persistent/...``) the
list and the delete. On a partitioned topic each acts on every partition, on the broker
serving it (broker/http/partitions.py), as Pulsar's do: the list is every partition's subscriptions, and a
reset to a message id is refused (405), as Pulsar refuses it: an id names one partition's position.
"""

from __future__ import annotations

import urllib.parse

from aiohttp import web

from broker.errors import NotAllowedError
from broker.http.admin import SERVICE, BadRequest, _json, _loaded, _subscription
from broker.http.partitions import in_both_domains, on_topic, url_topic
from broker.security.authorization import Need, requires
from storage.managed_ledger import InitialPosition, Position

routes = web.RouteTableDef()

TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
SUB = TOPIC + "/subscription/{sub}"
MAX_ID_FIELD = 2**63 - 1  # a ledger or entry id is a Java long


def _message_id(body) -> Position | None:
    """A message id body ``{"ledgerId": L, "entryId": E}``; BadRequest naming what is wrong."""
    if body is None:
        return None
    if not isinstance(body, dict) or "ledgerId" not in body or "entryId" not in body:
        raise BadRequest('expected a message id {"ledgerId": L, "entryId": E}')
    for name in ("ledgerId", "entryId"):
        value = body[name]
        if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= MAX_ID_FIELD:
            raise BadRequest(f"{name} must be an integer in -1..{MAX_ID_FIELD}, got {value!r}"[:300])
    return Position(body["ledgerId"], body["entryId"])


def _sub_action(request, action: str = "") -> str:
    """The route of the subscription in the URL below a topic, for a partition's broker."""
    return f"subscription/{urllib.parse.quote(request.match_info['sub'], safe='')}{action}"


async def _names(topic):
    return sorted(topic.subscriptions)


def _merged(lists) -> list[str]:
    return sorted(set().union(*lists))


@in_both_domains(routes, "GET", "/subscriptions")
async def list_subscriptions(request, domain: str):
    return await on_topic(request, _names, "GET", "subscriptions", combine=_merged, domain=domain)


@routes.put(SUB)
@requires(Need.TENANT_ADMIN)
async def create_subscription(request):
    start = _message_id(await _json(request))

    async def create(topic):
        await topic.create_subscription(request.match_info["sub"], start, InitialPosition.LATEST)

    return await on_topic(request, create, "PUT", _sub_action(request), create=True)


@in_both_domains(routes, "DELETE", "/subscription/{sub}")
async def delete_subscription(request, domain: str):
    """Refused (412) while consumers are connected; a non-persistent subscription also goes by itself with its
    last consumer."""
    async def delete(topic):
        await topic.unsubscribe(request.match_info["sub"])  # 404 for no such subscription

    return await on_topic(request, delete, "DELETE", _sub_action(request), domain=domain)


@routes.post(SUB + "/resetcursor/{timestamp}")
@requires(Need.TENANT_ADMIN)
async def reset_by_time(request):
    timestamp = request.match_info["timestamp"]
    if not timestamp.isdigit() or len(timestamp) > 19:
        raise BadRequest(f"timestamp must be milliseconds since the epoch, got {timestamp[:40]!r}")

    async def reset(topic):
        await _subscription(topic, request.match_info["sub"]).reset(
            await topic.position_for_publish_time(int(timestamp)))

    return await on_topic(request, reset, "POST", _sub_action(request, f"/resetcursor/{timestamp}"))


@routes.post(SUB + "/resetcursor")
@requires(Need.TENANT_ADMIN)
async def reset_by_id(request):
    position = _message_id(await _json(request))
    if position is None:
        raise BadRequest("the body must be a message id")
    if await request.app[SERVICE].resources.partition_count(url_topic(request)) > 0:
        raise NotAllowedError("reset-cursor to a message id is not allowed on a partitioned topic (the id names one "
                              "partition's position): reset each partition, or reset by time")
    topic = await _loaded(request)
    await _subscription(topic, request.match_info["sub"]).reset(position)
    return web.Response(status=204)
