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
``?subscription=``; a bundle's with ``.../{bundle}/clearBacklog``): on every
bundle, each asked of the broker that owns it; ``GET topics``. Brokers: ``GET /admin/v2/brokers/{cluster}``,
``GET /admin/v2/brokers/ready``; bookies: ``GET /admin/v2/bookies/all``,
``GET /admin/v2/bookies/racks-info`` (each bookie's zone and upgrade domain,
from its registration).
"""

from __future__ import annotations

import datetime
import json
import urllib.parse

from aiohttp import web

from broker.errors import NotAllowedError
from broker.http.admin import SERVICE, BadRequest, _bundle_here, _loaded, _ns, _subscription, _topic
from broker.http.forwarding import ask_owner, topic_path
from broker.http.partitions import each_at_once, first_refusal, in_both_domains, on_topic, url_topic
from broker.ownership.bundles import bundle_name
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from broker.topics import lifecycle
from magnetar.compression import CompressionError, decompress
from magnetar.protocol.frames import parse_headers_and_payload
from storage.client.api import parse_registration
from storage.errors import NoNodeError

routes = web.RouteTableDef()
# Added after broker/http/admin.py's routes, so /admin/v2/brokers/health and leaderBroker are matched first.
broker_routes = web.RouteTableDef()

TOPIC = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
SUB = TOPIC + "/subscription/{sub}"
MAX_PEEK_POSITION = 1_000_000  # a peek walks the unconsumed positions up to n
MAX_EXPIRE_SECONDS = 100 * 365 * 24 * 3600
BOOKIES_AVAILABLE = "/ledgers/available"


def _count(request, name: str, *, minimum: int, maximum: int) -> int:
    raw = request.match_info[name]
    if not raw.isdigit() or len(raw) > 12 or not minimum <= int(raw) <= maximum:
        raise BadRequest(f"{name} must be an integer in {minimum}..{maximum}, got {raw[:40]!r}")
    return int(raw)


async def _sub(request, what: str):
    """(topic, subscription) of the URL, for an operation on one topic's position: 405 on a partitioned topic
    (Pulsar refuses ``what`` there too: positions are per partition)."""
    service, base = request.app[SERVICE], _topic(request)
    if await service.resources.partition_count(base) > 0:
        raise NotAllowedError(f"{what} is not allowed on a partitioned topic ({base}): {what} each partition")
    topic = await _loaded(request)
    return topic, _subscription(topic, request.match_info["sub"])


def _on_subscription(request, operation, action: str):
    """``operation(subscription)`` on the URL's subscription of the topic, or of each partition of a partitioned
    topic (broker/http/partitions.py)."""
    name = request.match_info["sub"]

    async def local(topic):
        await operation(_subscription(topic, name))

    return on_topic(request, local, "POST", f"subscription/{urllib.parse.quote(name, safe='')}/{action}")


# ---- a subscription's backlog ---------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


@routes.get(SUB + "/position/{n}")
@requires(Need.TENANT_ADMIN)
async def peek(request):
    n = _count(request, "n", minimum=1, maximum=MAX_PEEK_POSITION)
    topic, sub = await _sub(request, "peek")
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
    _, sub = await _sub(request, "skip")
    await lifecycle.skip(sub, n)
    return web.Response(status=204)


@routes.post(SUB + "/skip_all")
@requires(Need.TENANT_ADMIN)
async def skip_all(request):
    return await _on_subscription(request, lifecycle.clear_backlog, "skip_all")


@routes.post(SUB + "/expireMessages/{seconds}")
@requires(Need.TENANT_ADMIN)
async def expire(request):
    seconds = _count(request, "seconds", minimum=0, maximum=MAX_EXPIRE_SECONDS)
    cutoff = lifecycle.now_ms() - seconds * 1000
    return await _on_subscription(request, lambda sub: lifecycle.expire_before(sub, cutoff),
                                  f"expireMessages/{seconds}")


@routes.post(TOPIC + "/all_subscription/expireMessages/{seconds}")
@requires(Need.TENANT_ADMIN)
async def expire_all(request):
    seconds = _count(request, "seconds", minimum=0, maximum=MAX_EXPIRE_SECONDS)
    cutoff = lifecycle.now_ms() - seconds * 1000

    async def expire_every_subscription(topic):
        for sub in list(topic.subscriptions.values()):
            if sub.durable:
                await lifecycle.expire_before(sub, cutoff)

    return await on_topic(request, expire_every_subscription, "POST", f"all_subscription/expireMessages/{seconds}")


# ---- topics ---------------------------------------------------------------------------


@in_both_domains(routes, "PUT", "/unload")
async def unload_topic(request, domain: str):
    """Close the topic where it is served; its clients look it up again and it loads where its bundle goes. A
    topic another broker serves is unloaded by that broker, a partitioned topic's partitions each where it is
    served; a topic nobody serves is unloaded already (204). A non-persistent topic loses what was in flight."""
    service, base = request.app[SERVICE], url_topic(request, domain)
    count = await service.resources.partition_count(base)
    registry = service.topics if base.persistent else service.non_persistent

    async def one(name) -> tuple[int, object]:
        loaded = registry.get(str(name))
        if loaded is not None and not loaded.closed:
            await service.unload_topic(name)
            return 204, None
        owner = await service.ownership.owner_of(name)
        if owner is None or owner.broker_id == service.ownership.me.broker_id:
            return 204, None
        return await ask_owner(request, owner, "PUT", topic_path(name, "unload"))

    names = [base.partition(i) for i in range(count)] if count else [base]
    return first_refusal(await each_at_once(map(one, names))) or web.Response(status=204)


@routes.post(TOPIC + "/terminate")
@requires(Need.TENANT_ADMIN)
async def terminate(request):
    topic = await _loaded(request)
    last = await topic.terminate()
    return web.json_response({"ledgerId": last.ledger_id, "entryId": last.entry_id,
                              "partitionIndex": topic.name.partition_index})


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
        status, doc = await ask_owner(request, owner, "POST", topic_path(partition, "terminate"))
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


async def _each_bundle(request, local, remote: tuple[str, str]) -> web.Response:
    """Act on every bundle of the namespace in the URL, as Pulsar's broker does: ``local(path)`` on the bundles
    this broker owns, ``remote`` (method, bundle route action) on each other broker's, asked of its owner with
    the caller's credentials; a bundle nobody owns has nothing loaded. The first refusal ends the request with
    its status (the other bundles are done or doing)."""
    service, ns = request.app[SERVICE], _ns(request)
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    bundles = await service.ownership.namespace_bundles(ns, fresh=True)

    async def one(bundle) -> tuple[int, object]:
        path = service.ownership.bundle_path(ns, bundle)
        if path in service.ownership.owned:
            await local(path)
            return 204, None
        owner = await service.ownership.owner_at(path)
        if owner is None or owner.broker_id == service.ownership.me.broker_id:
            return 204, None  # unowned, or this broker's node from before it let the bundle go
        method, action = remote
        return await ask_owner(request, owner, method, f"/admin/v2/namespaces/{ns}/{bundle_name(bundle)}/{action}")

    return first_refusal(await each_at_once(one(b) for b in bundles.ranges())) or web.Response(status=204)


@routes.put("/admin/v2/namespaces/{tenant}/{ns}/unload")
@requires(Need.SUPERUSER)
async def unload_namespace(request):
    """Unload every bundle of the namespace, each by its owner; a client's lookup then places them afresh."""
    return await _each_bundle(request, request.app[SERVICE].unload_bundle, ("PUT", "unload"))


async def _clear(service, topics, subscription: str | None) -> None:
    for topic in topics:
        for name, sub in list(topic.subscriptions.items()):
            if sub.durable and (subscription is None or name == subscription):
                await lifecycle.clear_backlog(sub)


async def _clear_bundle(service, path: str, subscription: str | None) -> None:
    """Clear the backlog of the (named, else every) durable subscription of the loaded topics of one bundle."""
    await _clear(service, [t for t in list(service.topics.values())
                           if not t.closed and await service.ownership.path_of(t.name) == path], subscription)


def _sub_query(request) -> str | None:
    name = request.query.get("subscription")
    if name is not None and (not name or len(name) > 1024):
        raise BadRequest("subscription must be a non-empty name of at most 1024 characters")
    return name


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/clearBacklog")
@requires(Need.TENANT_ADMIN)
async def clear_namespace_backlog(request):
    service, subscription = request.app[SERVICE], _sub_query(request)
    query = "" if subscription is None else "?" + urllib.parse.urlencode({"subscription": subscription})
    return await _each_bundle(request, lambda path: _clear_bundle(service, path, subscription),
                              ("POST", f"clearBacklog{query}"))


@routes.post("/admin/v2/namespaces/{tenant}/{ns}/{bundle}/clearBacklog")
@requires(Need.TENANT_ADMIN)
async def clear_bundle_backlog(request):
    path, _ = await _bundle_here(request)
    if path is not None:
        await _clear_bundle(request.app[SERVICE], path, _sub_query(request))
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
