"""Admin operations in Pulsar's REST shapes: a subscription's backlog, topic termination and inspection, namespace
unload and clear-backlog, and the broker and bookie listings.

Subscriptions (``/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/...``):
``GET position/{n}`` peeks at the n-th unconsumed message (the payload, with
Pulsar's ``X-Pulsar-*`` headers), ``POST skip/{n}``, ``POST skip_all``,
``POST expireMessages/{seconds}`` (and ``.../all_subscription/expireMessages/{seconds}``).
Topics: ``POST terminate`` (answers the last message id), ``POST terminate/partitions``
(each partition of a partitioned topic; answers ``{partition: last message id}``,
asking the owner of a partition another broker owns), ``GET internal-info``
(the managed ledger's metadata), ``GET backlog``. Namespaces: ``PUT unload``,
``POST clearBacklog`` (every subscription of every loaded topic, or one with
``?subscription=``; a bundle's with ``.../{bundle}/clearBacklog``),
``GET topics``. Brokers: ``GET /admin/v2/brokers/{cluster}``,
``GET /admin/v2/brokers/ready``; bookies: ``GET /admin/v2/bookies/all``,
``GET /admin/v2/bookies/racks-info`` (each bookie's zone and upgrade domain,
from its registration).
"""

from __future__ import annotations

import datetime
import json
import ssl

import aiohttp
from aiohttp import web

from broker.errors import NotAllowedError
from broker.http.admin import SERVICE, BadRequest, _bundle_here, _loaded, _ns, _subscription, _topic
from broker.http.forwarding import forward
from broker.ownership.bundles import bundle_name
from broker.ownership.ownership import NAMESPACE_ROOT
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics import lifecycle
from magnetar.compression import CompressionError, decompress
from magnetar.protocol.frames import parse_headers_and_payload
from magnetar.topic_name import encode_local_name
from storage.client.api import parse_registration
from storage.errors import NoNodeError

routes = web.RouteTableDef()
# Added after broker/http/admin.py's routes, so /admin/v2/brokers/health and leaderBroker are matched first.
broker_routes = web.RouteTableDef()

TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
SUB = TOPIC + "/subscription/{sub}"
MAX_PEEK_POSITION = 1_000_000  # a peek walks the unconsumed positions up to n
MAX_EXPIRE_SECONDS = 100 * 365 * 24 * 3600
FORWARD_TIMEOUT_S = 30
BOOKIES_AVAILABLE = "/ledgers/available"


def _count(request, name: str, *, minimum: int, maximum: int) -> int:
    raw = request.match_info[name]
    if not raw.isdigit() or len(raw) > 12 or not minimum <= int(raw) <= maximum:
        raise BadRequest(f"{name} must be an integer in {minimum}..{maximum}, got {raw[:40]!r}")
    return int(raw)


async def _sub(request):
    topic = await _loaded(request)
    return topic, _subscription(topic, request.match_info["sub"])


# ---- a subscription's backlog ---------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


@routes.get(SUB + "/position/{n}")
@requires(Need.TENANT_ADMIN)
async def peek(request):
    n = _count(request, "n", minimum=1, maximum=MAX_PEEK_POSITION)
    topic, sub = await _sub(request)
    entry = await lifecycle.peek(sub, n)
    if entry is None:
        raise NotFoundError(f"subscription {sub.name} has fewer than {n} messages in its backlog")
    md, payload, _ = parse_headers_and_payload(entry.data)
    try:
        payload = decompress(md.compression, payload, md.uncompressed_size)
    except CompressionError:  # an undecodable payload is shown as stored
        pass
    headers = {"X-Pulsar-Message-ID": f"{entry.position.ledger_id}:{entry.position.entry_id}",
               "X-Pulsar-producer-name": md.producer_name, "X-Pulsar-sequence-id": str(md.sequence_id),
               "X-Pulsar-publish-time": _iso(md.publish_time),
               "X-Pulsar-PROPERTY": json.dumps({kv.key: kv.value for kv in md.properties})}
    for kv in md.properties:
        if kv.key.isascii() and kv.key.isprintable() and kv.value.isascii() and kv.value.isprintable():
            headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    if md.event_time:
        headers["X-Pulsar-event-time"] = _iso(md.event_time)
    if md.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if md.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = md.partition_key
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")


@routes.post(SUB + "/skip/{n}")
@requires(Need.TENANT_ADMIN)
async def skip(request):
    n = _count(request, "n", minimum=0, maximum=2**63 - 1)
    _, sub = await _sub(request)
    await lifecycle.skip(sub, n)
    return web.Response(status=204)


@routes.post(SUB + "/skip_all")
@requires(Need.TENANT_ADMIN)
async def skip_all(request):
    _, sub = await _sub(request)
    await lifecycle.clear_backlog(sub)
    return web.Response(status=204)


@routes.post(SUB + "/expireMessages/{seconds}")
@requires(Need.TENANT_ADMIN)
async def expire(request):
    seconds = _count(request, "seconds", minimum=0, maximum=MAX_EXPIRE_SECONDS)
    _, sub = await _sub(request)
    await lifecycle.expire_before(sub, lifecycle.now_ms() - seconds * 1000)
    return web.Response(status=204)


@routes.post(TOPIC + "/all_subscription/expireMessages/{seconds}")
@requires(Need.TENANT_ADMIN)
async def expire_all(request):
    seconds = _count(request, "seconds", minimum=0, maximum=MAX_EXPIRE_SECONDS)
    topic = await _loaded(request)
    cutoff = lifecycle.now_ms() - seconds * 1000
    for sub in list(topic.subscriptions.values()):
        if sub.durable:
            await lifecycle.expire_before(sub, cutoff)
    return web.Response(status=204)


# ---- topics ---------------------------------------------------------------------------


@routes.post(TOPIC + "/terminate")
@requires(Need.TENANT_ADMIN)
async def terminate(request):
    topic = await _loaded(request)
    last = await topic.terminate()
    return web.json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id,
                              "partitionIndex": topic.name.partition_index})


async def _terminate_at(request, owner, partition) -> tuple[int, object]:
    """Terminate a partition on the broker that owns it (its own terminate route), with the caller's credentials:
    (status, answer)."""
    service = request.app[SERVICE]
    base = owner.web_url(request.secure)
    url = f"{base}/admin/v2/persistent/{partition.namespace_name}/{encode_local_name(partition.local_name)}/terminate"
    headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
    tls = {"ssl": ssl.create_default_context(cafile=service.config.tls_trust_certs_file_path)} \
        if base.startswith("https:") else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)) as http:
        async with http.post(url, headers=headers, allow_redirects=False, **tls) as resp:
            body = await resp.text()
            if resp.status != 200:
                return resp.status, f"terminating {partition} on broker {owner.broker_id}: {body[:500]}"
            return 200, json.loads(body)


@routes.post(TOPIC + "/terminate/partitions")
@requires(Need.TENANT_ADMIN)
async def terminate_partitions(request):
    """Terminate every partition (Pulsar's terminatePartitionedTopic); 405 for a topic that is not partitioned.
    A partition another broker owns is terminated there; its refusal (status and reason) ends the request."""
    service, base = request.app[SERVICE], _topic(request)
    count = await service.resources.partition_count(base)
    if count == 0:
        if await service.factory.exists(base.managed_ledger_name):
            raise NotAllowedError(f"{base} is not a partitioned topic; terminate it with .../terminate")
        raise NotFoundError(f"partitioned topic {base} does not exist")
    answer = {}
    for i in range(count):
        partition = base.partition(i)
        owner = await service.ownership.try_acquire(partition)
        if owner.broker_id == service.ownership.me.broker_id:
            last = await (await service.get_topic(partition, create=True)).terminate()
            answer[str(i)] = {"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": i}
            continue
        status, doc = await _terminate_at(request, owner, partition)
        if status != 200:
            return web.json_response({"reason": doc}, status=status)
        answer[str(i)] = doc
    return web.json_response(answer)


@routes.get(TOPIC + "/internal-info")
@requires(Need.TENANT_ADMIN)
async def internal_info(request):
    """Pulsar's ManagedLedgerInfo: the ledger list, terminated position and properties."""
    topic = await _loaded(request)
    ml = topic.ml
    doc = {"version": 0, "ledgers": [{"ledgerId": l["ledger_id"], "entries": l["entries"], "size": l["size"],
                                      "timestamp": l.get("timestamp", 0)} for l in ml.ledgers_info()],
           "properties": dict(ml.properties)}
    if topic.terminated:
        last = ml.last_confirmed_entry
        doc["terminatedPosition"] = {"ledgerId": last.ledger_id, "entryId": last.entry_id}
    return web.json_response(doc)


@routes.get(TOPIC + "/backlog")
@requires(Need.TENANT_ADMIN)
async def backlog(request):
    """Pulsar's PersistentOfflineTopicStats shape, from the loaded topic."""
    service, topic = request.app[SERVICE], await _loaded(request)
    subs = {name: {"cursorBacklog": s.backlog, "cursorLedgerId": -1} for name, s in topic.subscriptions.items()}
    return web.json_response({
        "storageSize": topic.ml.total_size, "totalMessages": topic.ml.number_of_entries,
        "messageBacklog": max((s["cursorBacklog"] for s in subs.values()), default=0),
        "brokerName": service.config.broker_id, "topicName": str(topic.name),
        "dataLedgerDetails": [{"ledgerId": l["ledger_id"], "entries": l["entries"], "size": l["size"],
                               "timestamp": l.get("timestamp", 0)} for l in topic.ml.ledgers_info()],
        "cursorDetails": subs, "statGeneratedAt": _iso(lifecycle.now_ms()),
    })


# ---- namespaces -----------------------------------------------------------------------


async def _on_other_owners(request, ns, action: str) -> web.Response | None:
    """Ask the owner of each bundle of ``ns`` that another broker owns to do ``action`` to it (``unload``,
    ``clearBacklog``): this request's method and query on that bundle's route, with the caller's credentials, as
    Pulsar asks each owner. The first refusal an owner answers, or None when all did it."""
    service = request.app[SERVICE]
    for bundle in (await service.ownership.namespace_bundles(ns, fresh=True)).ranges():
        path = service.ownership.bundle_path(ns, bundle)
        owner = None if path in service.ownership.owned else await service.ownership.owner_at(path)
        if owner is None:
            continue
        query = f"?{request.query_string}" if request.query_string else ""
        url = f"{owner.web_url(request.secure)}/admin/v2/namespaces/{ns.tenant}/{ns.namespace}/" \
              f"{bundle_name(bundle)}/{action}{query}"
        answer = await forward(request, url, owner.broker_id)
        if answer.status >= 300:
            return answer
    return None


@routes.put("/admin/v2/namespaces/{tenant}/{ns}/unload")
@requires(Need.SUPERUSER)
async def unload_namespace(request):
    """Unload every bundle of the namespace: those this broker owns here, the others on their owners (a client's
    lookup then places them afresh)."""
    service, ns = request.app[SERVICE], _ns(request)
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    prefix = f"{NAMESPACE_ROOT}/{ns.tenant}/{ns.namespace}/"
    for path in [p for p in list(service.ownership.owned) if p.startswith(prefix)]:
        await service.unload_bundle(path)
    return await _on_other_owners(request, ns, "unload") or web.Response(status=204)


async def _clear(service, topics, subscription: str | None) -> None:
    for topic in topics:
        for name, sub in list(topic.subscriptions.items()):
            if sub.durable and (subscription is None or name == subscription):
                await lifecycle.clear_backlog(sub)


def _sub_query(request) -> str | None:
    name = request.query.get("subscription")
    if name is not None and (not name or len(name) > 1024):
        raise BadRequest("subscription must be a non-empty name of at most 1024 characters")
    return name


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/clearBacklog")
@requires(Need.TENANT_ADMIN)
async def clear_namespace_backlog(request):
    service, ns = request.app[SERVICE], _ns(request)
    await service.resources.get_policies(ns)
    topics = [t for t in list(service.topics.values()) if t.name.namespace_name == ns and not t.closed]
    await _clear(service, topics, _sub_query(request))
    return await _on_other_owners(request, ns, "clearBacklog") or web.Response(status=204)


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/{bundle}/clearBacklog")
@requires(Need.TENANT_ADMIN)
async def clear_bundle_backlog(request):
    service = request.app[SERVICE]
    path, _ = await _bundle_here(request)
    topics = []
    if path is not None:
        topics = [t for t in list(service.topics.values())
                  if not t.closed and await service.ownership.path_of(t.name) == path]
    await _clear(service, topics, _sub_query(request))
    return web.Response(status=204)


@routes.get("/admin/v2/namespaces/{tenant}/{ns}/topics")
@requires(Need.TENANT_ADMIN)
async def namespace_topics(request):
    """Every topic of the namespace: non-partitioned ones and partitions (Pulsar's getTopics)."""
    service, ns = request.app[SERVICE], _ns(request)
    await service.resources.get_policies(ns)
    return web.json_response([str(t) for t in await service.resources.topics(ns)])


# ---- brokers and bookies ----------------------------------------------------------------


@routes.get("/admin/v2/brokers/ready")
@requires(Need.OPEN)
async def broker_ready(request):
    service = request.app[SERVICE]
    if service.ownership is None or not service.ownership.writable:
        raise NotAllowedError("broker is not ready: its metadata session is being re-established")
    return web.Response(text="ok")


@broker_routes.get("/admin/v2/brokers/{cluster}")
@requires(Need.SUPERUSER)
async def active_brokers(request):
    service, cluster = request.app[SERVICE], request.match_info["cluster"]
    if cluster != service.config.cluster_name:
        raise NotFoundError(f"cluster {cluster!r} does not exist here; this is {service.config.cluster_name!r}")
    brokers = await service.ownership.live_brokers()
    return web.json_response(sorted((b.web_service_url or b.web_service_url_tls or b.broker_id).split("://")[-1]
                                    for b, _ in brokers))


async def _bookies(service) -> list:
    store, out = service.store, []
    for base, writable in ((BOOKIES_AVAILABLE, True), (f"{BOOKIES_AVAILABLE}/readonly", False)):
        try:
            children = await store.children(base)
        except NoNodeError:
            continue
        for child in sorted(children):
            if child == "readonly":
                continue
            try:
                data, _ = await store.get(f"{base}/{child}")
            except NoNodeError:
                continue
            out.append(parse_registration(child, data, writable))
    return out


@routes.get("/admin/v2/bookies/all")
@requires(Need.SUPERUSER)
async def all_bookies(request):
    return web.json_response({"bookies": [{"bookieId": b.bookie_id} for b in await _bookies(request.app[SERVICE])]})


@routes.get("/admin/v2/bookies/racks-info")
@requires(Need.SUPERUSER)
async def racks_info(request):
    """Pulsar's {group: {bookie: {"rack", "hostname"}}}, from each bookie's registered network location
    (``/zone/upgradeDomain``), under the group "default"."""
    group = {}
    for b in await _bookies(request.app[SERVICE]):
        group[b.bookie_id] = {"rack": b.network_location, "hostname": b.address.rpartition(":")[0],
                              "zone": b.zone, "upgradeDomain": b.upgrade_domain}
    return web.json_response({"default": group} if group else {})
