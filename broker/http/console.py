"""The operator console on the broker's HTTP server: its static page at ``/console``, and the REST endpoints
it reads that Pulsar's admin API has no shape for, under ``/admin/magnetar/v1``.

Every one is read-only and declares its permission like any admin route: cluster-wide views (brokers,
bookies, health, ledgers, entries, the metadata tree) need a superuser, a namespace's or topic's views a
tenant admin. docs/console.md lists them with their answers. What they compute from what they read lives
in broker/console/views.py (pure).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from broker.console import STATIC_DIR, views
from broker.errors import ServiceNotReadyError
from broker.http.admin import SERVICE, BadRequest, _loaded, _ns
from broker.http.forwarding import FORWARDED, forward
from broker.http.topic_admin import _bookies
from broker.ownership.resources import NotFoundError
from broker.security.authorization import Need, requires
from storage.autorecovery.underreplication import UnderReplication
from storage.errors import NoNodeError, NoSuchEntryError, NoSuchLedgerError, StorageError
from storage.metadata import paths

PREFIX = "/admin/magnetar/v1"
BOOKIE_INFO_TIMEOUT_S = 1.5  # a bookie that does not answer its info in this long shows as unreadable
UNDER_REPLICATED_SHOWN = 100  # marks read and listed; the count covers them all
_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
routes = web.RouteTableDef()


# ---- the page ---------------------------------------------------------------------------------


@routes.get("/console")
@requires(Need.OPEN)
async def console_root(request):
    raise web.HTTPFound("/console/")


@routes.get("/console/{name:[A-Za-z0-9_.-]*}")
@requires(Need.OPEN)
async def console_file(request):
    """The console's files; only names that exist in static/ (the pattern refuses '/' and so '..')."""
    name = request.match_info["name"] or "index.html"
    path = STATIC_DIR / name
    if name.startswith(".") or path.suffix not in _TYPES or not path.is_file():
        raise web.HTTPNotFound(text=json.dumps({"reason": f"no console file {name[:80]}"}),
                               content_type="application/json")
    return web.Response(body=path.read_bytes(), content_type=_TYPES[path.suffix], charset="utf-8",
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


def _page(request) -> views.Page:
    try:
        return views.parse_page(request.query)
    except views.ConsoleRequestError as exc:
        raise BadRequest(str(exc)) from exc


def _checked(fn, raw):
    try:
        return fn(raw)
    except views.ConsoleRequestError as exc:
        raise BadRequest(str(exc)) from exc


# ---- cluster --------------------------------------------------------------------------------


async def _leader(service) -> str | None:
    if service.load_manager is None:
        return None
    leader = await service.load_manager.election.leader()
    return None if leader is None else leader.broker_id


async def _brokers(service) -> list[dict]:
    leader = await _leader(service)
    out = []
    for info, report in await service.ownership.live_brokers():
        out.append({**info.to_json(), **report.to_json(), "leader": info.broker_id == leader,
                    "thisBroker": info.broker_id == service.config.broker_id})
    return out


@routes.get(PREFIX + "/brokers")
@requires(Need.SUPERUSER)
async def brokers(request):
    """Every live broker: its URLs, load report (bundles, topics, rates, CPU) and whether it leads."""
    service = request.app[SERVICE]
    return web.json_response({"brokers": await _brokers(service), "leader": await _leader(service)})


async def _bookie_info(session: aiohttp.ClientSession, http_address: str | None) -> dict | str:
    if not http_address:
        return "it registered no HTTP address"
    try:
        async with session.get(f"http://{http_address}/api/v1/bookie/info") as answer:
            if answer.status != 200:
                return f"HTTP {answer.status} from {http_address}"
            return await answer.json()
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__} from {http_address}"


async def _bookie_rows(service) -> list[dict]:
    registered = [{"bookieId": b.bookie_id, "state": "writable" if b.writable else "readonly",
                   "address": b.address, "httpAddress": b.http_address, "networkLocation": b.network_location,
                   "zone": b.zone, "upgradeDomain": b.upgrade_domain} for b in await _bookies(service)]
    try:
        cookies = await service.store.children(paths.COOKIES)
    except NoNodeError:
        cookies = []
    timeout = aiohttp.ClientTimeout(total=BOOKIE_INFO_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        infos = await asyncio.gather(*(_bookie_info(session, r["httpAddress"]) for r in registered))
    return views.bookie_rows(registered, cookies, {r["bookieId"]: i for r, i in zip(registered, infos)})


async def _under_replicated(service) -> dict:
    """The autorecovery auditor's marks: how many ledgers are under-replicated, and the first ones with why."""
    marks = UnderReplication(service.store)
    ids = await marks.list()
    shown = []
    for ledger_id in ids[:UNDER_REPLICATED_SHOWN]:
        found = await marks.get(ledger_id)
        if found is not None:
            mark = found[0]
            shown.append({"ledgerId": ledger_id, "missing": sorted(mark.missing), "replace": sorted(mark.replace),
                          "check": mark.check})
    return {"count": len(ids), "ledgers": shown}


@routes.get(PREFIX + "/bookies")
@requires(Need.SUPERUSER)
async def bookies(request):
    """Every bookie with a registration or a cookie: zone, upgrade domain, writable/readonly/down, disk use and
    recent journal fsync latency (from the bookie's own /api/v1/bookie/info); and the under-replicated ledgers
    autorecovery's auditor has marked."""
    service = request.app[SERVICE]
    rows, marked = await asyncio.gather(_bookie_rows(service), _under_replicated(service))
    return web.json_response({"bookies": rows, "underReplicated": marked})


@routes.get(PREFIX + "/health")
@requires(Need.SUPERUSER)
async def health(request):
    """{"status": green|amber|red, "findings": [{"level", "subject", "reason"}]}."""
    service = request.app[SERVICE]
    rows, brokers_, leader, marked = await asyncio.gather(_bookie_rows(service), _brokers(service), _leader(service),
                                                          _under_replicated(service))
    findings = views.health_findings(rows, brokers_, leader, service.config.managed_ledger_ensemble_size,
                                     under_replicated=marked["count"])
    if service.ownership is not None and not service.ownership.writable:
        findings.insert(0, {"level": "red", "subject": f"broker {service.config.broker_id}",
                            "reason": "its metadata session is being re-established: no ownership changes"})
    return web.json_response({"status": views.health_level(findings), "findings": findings})


# ---- topics -------------------------------------------------------------------------------------


def _topic_row(service, name) -> dict:
    """What the topic list shows; live numbers only for a topic loaded here (listing never loads one)."""
    topic = service.topics.get(str(name))
    row = {"name": str(name), "localName": name.local_name, "loaded": topic is not None and not topic.closed}
    if row["loaded"]:
        row.update({"msgInCounter": topic.msg_in, "msgOutCounter": topic.msg_out,
                    "msgBacklog": sum(s.backlog for s in topic.subscriptions.values()),
                    "storageSize": topic.ml.total_size, "producers": len(topic.producers),
                    "subscriptions": len(topic.subscriptions),
                    "consumers": sum(len(s.consumers) for s in topic.subscriptions.values())})
        # The stats window's rates, as the topic's /stats and /metrics give them (not between two polls).
        rates = service.topic_stats.add_rates(str(name), {})
        row.update({k: rates[k] for k in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")})
    return row


@routes.get(PREFIX + "/namespaces/{tenant}/{ns}/topics")
@requires(Need.TENANT_ADMIN)
async def namespace_topics(request):
    """A page of the namespace's persistent topics: ``?offset=0&limit=50&filter=substring`` (limit <= 500)."""
    service, ns, page = request.app[SERVICE], _ns(request), _page(request)
    await service.resources.get_policies(ns)  # 404 for a missing namespace
    names = await service.resources.topics(ns)
    by_name = {str(n): n for n in names}
    shown, total = views.page_of(sorted(by_name), page)
    rows = [_topic_row(service, by_name[n]) for n in shown]
    if FORWARDED not in request.headers:
        await _rows_from_owners(request, rows, [by_name[n] for n in shown])
    return web.json_response({"total": total, "offset": page.offset, "limit": page.limit, "topics": rows})


async def _rows_from_owners(request, rows: list[dict], names: list) -> None:
    """Fill in the rows of topics another broker serves from that broker's own answer to this request (one
    request per owner, sent on with the caller's credentials), so a page shows every loaded topic's numbers
    whichever broker or worker serves it. An owner that does not answer leaves its rows as they are."""
    service = request.app[SERVICE]
    owners, owner_at = {}, {}
    for row, name in zip(rows, names):
        if row["loaded"]:
            continue
        path = await service.ownership.path_of(name)
        if path not in owner_at:
            owner_at[path] = None if path in service.ownership.owned else await service.ownership.owner_at(path)
        owner = owner_at[path]
        if owner is not None and owner.broker_id != service.ownership.me.broker_id:
            owners[owner.broker_id] = owner
    for owner in owners.values():
        try:
            answer = await forward(request, f"{owner.web_url(request.secure)}{request.path_qs}", owner.broker_id)
        except ServiceNotReadyError:
            continue
        if answer.status != 200:
            continue
        theirs = {r["name"]: r for r in json.loads(answer.body)["topics"] if r["loaded"]}
        for i, row in enumerate(rows):
            if row["name"] in theirs:
                rows[i] = theirs[row["name"]]


async def _zones(service) -> tuple[dict[str, str], int]:
    registered = await _bookies(service)
    return {b.bookie_id: b.zone for b in registered}, len({b.zone for b in registered})


@routes.get(PREFIX + "/persistent/{tenant}/{ns}/{topic}/ledgers")
@requires(Need.TENANT_ADMIN)
async def topic_ledgers(request):
    """The topic's managed ledger as its chain of ledgers (oldest first; the newest ``limit``, default 50),
    each with the managed ledger's entry count and size and the ledger's own metadata (state, fragments,
    ensembles with zones, zone-rule check)."""
    service, page = request.app[SERVICE], _page(request)
    topic = await _loaded(request)
    chain = topic.ml.ledgers_info()
    zone_of, zones = await _zones(service)
    shown = chain[max(0, len(chain) - page.offset - page.limit) : len(chain) - page.offset]
    out = []
    for item in shown:
        row = {"ledgerId": item["ledger_id"], "entries": item["entries"], "size": item["size"],
               "timestamp": item.get("timestamp", 0)}
        try:
            md, _ = await service.client.get_metadata(item["ledger_id"])
            row["metadata"] = views.ledger_view(md, zone_of, zones)
        except NoSuchLedgerError:
            row["metadata"] = None
        out.append(row)
    last = topic.ml.last_confirmed_entry
    return web.json_response({"topic": str(topic.name), "total": len(chain), "ledgers": out,
                              "lastConfirmedEntry": f"{last.ledger_id}:{last.entry_id}",
                              "terminated": bool(topic.terminated)})


# ---- ledgers and entries -----------------------------------------------------------------------


async def _metadata(service, ledger_id: int):
    try:
        md, _ = await service.client.get_metadata(ledger_id)
    except NoSuchLedgerError as exc:
        raise NotFoundError(str(exc)) from exc
    return md


@routes.get(PREFIX + "/ledgers/{ledger}")
@requires(Need.SUPERUSER)
async def ledger(request):
    """One ledger's metadata with its fragments and the zone-rule check (``bookie shell ledgermetadata``)."""
    service = request.app[SERVICE]
    md = await _metadata(service, _checked(views.parse_ledger_id, request.match_info["ledger"]))
    zone_of, zones = await _zones(service)
    return web.json_response(views.ledger_view(md, zone_of, zones))


@routes.get(PREFIX + "/ledgers/{ledger}/entries/{entry}")
@requires(Need.SUPERUSER)
async def entry(request):
    """One entry of a ledger, ``first``, ``last`` (up to the last add confirmed) or by id, in hex and UTF-8
    (``bookie shell readledger``); the first 4 KiB of it. Reads without recovery: a writer is not fenced."""
    service = request.app[SERVICE]
    ledger_id = _checked(views.parse_ledger_id, request.match_info["ledger"])
    which = _checked(views.parse_entry_selector, request.match_info["entry"])
    md = await _metadata(service, ledger_id)
    handle = await service.client.open_ledger(ledger_id, recovery=False, password=md.password)
    try:
        last = handle.last_add_confirmed
        if last < 0:
            raise NotFoundError(f"ledger {ledger_id} has no readable entry yet")
        entry_id = 0 if which == "first" else last if which == "last" else which
        if entry_id > last:
            raise NotFoundError(f"entry {entry_id} is past ledger {ledger_id}'s last add confirmed ({last})")
        try:
            read = await handle.read_entry(entry_id)
        except NoSuchEntryError as exc:
            raise NotFoundError(f"ledger {ledger_id} entry {entry_id}: {exc}") from exc
        except StorageError as exc:
            raise NotFoundError(f"ledger {ledger_id} entry {entry_id} could not be read: {exc}") from exc
    finally:
        await handle.close()
    return web.json_response({"ledgerId": ledger_id, "lastAddConfirmed": last,
                              **views.entry_view(entry_id, bytes(read.payload))})


# ---- the metadata tree -------------------------------------------------------------------------------


@routes.get(PREFIX + "/metadata")
@requires(Need.SUPERUSER)
async def metadata_node(request):
    """``?path=/x&offset&limit&filter``: one node of the metadata store, its data decoded (JSON, msgpack,
    UTF-8 or hex; secrets redacted), version, ephemeral flag and a page of its children. Read-only."""
    service, page = request.app[SERVICE], _page(request)
    path = _checked(views.check_metadata_path, request.query.get("path", "/"))
    store = service.store
    try:
        if path == "/":
            data, stat = b"", None
        else:
            data, stat = await store.get(path)
        children = await store.children(path)
    except NoNodeError as exc:
        raise NotFoundError(f"no metadata node {path}") from exc
    shown, total = views.page_of(children, page)
    node = {"path": path, "data": views.decode_node(data), "childrenTotal": total, "children": shown,
            "offset": page.offset, "limit": page.limit}
    if stat is not None:
        node.update({"version": stat.version, "ephemeral": stat.ephemeral_owner != 0,
                     "ephemeralOwner": f"0x{stat.ephemeral_owner:x}", "created": stat.created_ms,
                     "modified": stat.modified_ms, "numChildren": stat.num_children})
    return web.json_response(node)
