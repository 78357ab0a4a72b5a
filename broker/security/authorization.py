"""Authorization: may this role do this to this topic, namespace or tenant? (Pulsar's PulsarAuthorizationProvider.)

How this works:

* ``allows`` is the whole rule, a pure function of the role, what the
  operation needs (``Need``) and the grants that apply. ``super_user_roles``
  (broker config) may do everything; a tenant's ``adminRoles`` administer it
  and may also produce, consume and look up in its namespaces; any other role
  needs a grant of ``produce`` / ``consume`` on the namespace or on the topic
  (a partition inherits its partitioned topic's grants). A lookup needs
  either action (Pulsar's canLookup); listing a namespace's topics needs either
  at namespace level. Tenant CRUD and broker-wide routes need a superuser. An
  anonymous client (no role and no ``anonymous_user_role``) is refused.
* ``AuthorizationService`` reads the grants from the metadata store
  (``/admin/policies/<tenant>`` and ``/admin/policies/<tenant>/<ns>``) into a
  cache. Each cached node has a data watch, registered before it is read, so
  every later change is heard; a change marks the entry stale (a read in
  flight when it fires is read again) and re-checks every producer and
  consumer of the affected loaded topics: one that lost its permission is
  closed by the broker (CLOSE_PRODUCER / CLOSE_CONSUMER), and the client's
  reconnection is refused by the lookup. This is what Pulsar does when a
  namespace's policies change (each topic's producers and consumers check
  their permission again and are disconnected), and it is why a revocation
  takes effect on live clients within the watch delay (well under 5 s), not
  only on new operations. A metadata session that is lost or renewed marks
  everything stale and re-checks every client.
* With ``authorization_enabled = false`` every check returns at once, with no
  store reads; so does a superuser's.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable

from aiohttp import web

from broker.errors import AuthorizationError, BrokerError, TopicNotFoundError, metadata_errors
from broker.ownership.resources import POLICIES_ROOT, normalize_auth_policies
from magnetar.topic_name import NamespaceName, TopicName
from storage.errors import MetadataError, NoNodeError
from storage.metadata import SessionState

log = logging.getLogger(__name__)

# The role authentication put on an aiohttp request (str, or None for a request without credentials).
HTTP_ROLE_KEY = web.RequestKey("magnetar.auth_role", object)
MAX_CACHED_NODES = 10_000  # tenants + namespaces whose grants are cached (and watched) at once


class Need(enum.Enum):
    """What an operation needs. OPEN is for HTTP routes anyone may call (health, metrics)."""

    OPEN = "open"
    PRODUCE = "produce"
    CONSUME = "consume"
    LOOKUP = "lookup"  # a topic: produce or consume
    NAMESPACE_LOOKUP = "list the topics of"  # a namespace: produce or consume granted on the namespace itself
    TENANT_ADMIN = "administer"
    SUPERUSER = "superuser"


@dataclass(frozen=True)
class Grants:
    """What the metadata store says about one topic's, namespace's or tenant's permissions."""

    admin_roles: frozenset[str] = frozenset()
    namespace_actions: dict | None = None  # role -> actions granted on the namespace
    topic_actions: dict | None = None  # role -> actions granted on the topic (or its partitioned topic)
    exists: bool = True  # False when the tenant or namespace itself is missing


NO_GRANTS = Grants()


def allows(role: str | None, need: Need, super_user_roles: Iterable[str], grants: Grants = NO_GRANTS) -> bool:
    """The authorization rule (see the module docstring)."""
    if need is Need.OPEN:
        return True
    if role is None:
        return False
    if role in super_user_roles:
        return True
    if need is Need.SUPERUSER:
        return False
    if role in grants.admin_roles:
        return True
    if need is Need.TENANT_ADMIN:
        return False
    actions = set((grants.namespace_actions or {}).get(role, ()))
    if need is not Need.NAMESPACE_LOOKUP:
        actions |= set((grants.topic_actions or {}).get(role, ()))
    if need is Need.PRODUCE:
        return "produce" in actions
    if need is Need.CONSUME:
        return "consume" in actions
    return bool(actions & {"produce", "consume"})  # LOOKUP, NAMESPACE_LOOKUP


def refusal(role: str | None, need: Need, resource) -> str:
    """The message of an AuthorizationError: who was refused what on which resource."""
    who = f"role {role!r}" if role is not None else "an anonymous client (no role, and no anonymous_user_role)"
    if need is Need.SUPERUSER:
        return f"{who} is not a superuser; {resource or 'this operation'} needs one"
    if need is Need.TENANT_ADMIN:
        return f"{who} is not allowed to administer {_describe(resource)} (needs a tenant admin role or a superuser)"
    verbs = {Need.PRODUCE: "produce on", Need.CONSUME: "consume from", Need.LOOKUP: "look up",
             Need.NAMESPACE_LOOKUP: "list the topics of"}
    return f"{who} is not allowed to {verbs[need]} {_describe(resource)}"


def _describe(resource) -> str:
    if isinstance(resource, TopicName):
        return f"topic {resource}"
    if isinstance(resource, NamespaceName):
        return f"namespace {resource}"
    return f"tenant {resource}"


def effective_role(conn) -> str | None:
    """The role a binary connection acts as: the authenticated one, else ``anonymous_user_role`` (None when unset)."""
    role = getattr(conn, "auth_role", None)
    return role if role is not None else conn.config.anonymous_user_role


def request_role(request, config) -> str | None:
    """The role an HTTP request acts as (authentication's, else ``anonymous_user_role``)."""
    role = request.get(HTTP_ROLE_KEY)
    return role if role is not None else config.anonymous_user_role


def requires(need: Need):
    """Declare what an HTTP route needs; broker/http/permissions.py enforces it before the handler runs, and a
    route that declares nothing is refused (and fails tests/security/test_authorization.py)."""
    def declare(handler):
        handler.required_access = need
        return handler

    return declare


async def check(service, role: str | None, resource, need: Need) -> int:
    """Raise AuthorizationError unless ``role`` may do ``need`` on ``resource`` (a TopicName, NamespaceName or
    tenant name). Returns at once when authorization is off. The int returned is for ``admitted``."""
    return await service.authorization.check(role, resource, need)


class _Node:
    """One cached metadata node: its parsed value, its watch, and whether a change made it stale."""

    __slots__ = ("value", "fresh", "generation", "watch", "loading")

    def __init__(self) -> None:
        self.value = None
        self.fresh = False
        self.generation = 0
        self.watch = None
        self.loading: asyncio.Task | None = None


class AuthorizationService:
    """The grants of tenants and namespaces, cached and watched; checks for commands and routes; re-checks of
    live producers and consumers when grants change."""

    def __init__(self, service):
        self.service = service
        self.config = service.config
        self.store = service.store
        self.enabled = self.config.authorization_enabled
        self.super_user_roles = frozenset(self.config.super_user_roles)
        self._nodes: OrderedDict[str, _Node] = OrderedDict()
        self._tasks: set[asyncio.Task] = set()
        self.changes = 0  # grant changes heard so far: a check's answer is stale once this moved on
        if self.enabled:
            self.store.add_session_listener(self._session_changed)

    # ---- checks ----------------------------------------------------------------

    async def check(self, role: str | None, resource, need: Need) -> int:
        """Raise AuthorizationError unless allowed. Returns the change count the answer was based on, for
        ``admitted``."""
        changes = self.changes
        if not await self.allowed(role, resource, need):
            if role is not None:
                await self.raise_if_missing(resource, need)
            raise AuthorizationError(refusal(role, need, resource))
        return changes

    async def raise_if_missing(self, resource, need: Need) -> None:
        """A refused topic whose namespace does not exist is TopicNotFound, as in Pulsar (its lookup fails before
        authorization is asked)."""
        if isinstance(resource, TopicName) and not (await self.grants(resource, need)).exists:
            raise TopicNotFoundError(f"topic {resource} does not exist: namespace {resource.namespace_name} "
                                     "does not exist")

    def admitted(self, topic, checked_at: int) -> None:
        """A producer or consumer allowed by a check that returned ``checked_at`` is now attached to ``topic``. If
        grants changed in between (a topic load takes a while), the re-check those changes started may have run
        before it was attached: check the topic's clients again."""
        if self.enabled and self.changes != checked_at:
            self._spawn(self._recheck_topic(topic))

    async def allowed(self, role: str | None, resource, need: Need) -> bool:
        if not self.enabled or need is Need.OPEN or (role is not None and role in self.super_user_roles):
            return True
        if role is None or need is Need.SUPERUSER:
            return False
        return allows(role, need, self.super_user_roles, await self.grants(resource, need))

    async def grants(self, resource, need: Need = Need.LOOKUP) -> Grants:
        """The grants that apply to ``resource`` (a missing tenant or namespace has none)."""
        if isinstance(resource, TopicName):
            tenant, ns = resource.namespace_name.tenant, resource.namespace_name
        elif isinstance(resource, NamespaceName):
            tenant, ns = resource.tenant, resource
        else:
            tenant, ns = str(resource), None
        admin_roles = await self._cached(f"{POLICIES_ROOT}/{tenant}", _admin_roles)
        if admin_roles is None or ns is None or need is Need.TENANT_ADMIN:
            return Grants(admin_roles or frozenset(), exists=admin_roles is not None)
        auth = await self._cached(f"{POLICIES_ROOT}/{ns.tenant}/{ns.namespace}", _auth_policies)
        if auth is None:
            return Grants(admin_roles, exists=False)
        topic_actions = None
        if isinstance(resource, TopicName):
            topics = auth["destination_auth"]
            own = topics.get(str(resource), {})
            parent = topics.get(str(resource.partitioned_name), {}) if resource.partition_index >= 0 else {}
            topic_actions = {r: set(own.get(r, ())) | set(parent.get(r, ())) for r in {*own, *parent}}
        return Grants(admin_roles, auth["namespace_auth"], topic_actions)

    # ---- the cache -------------------------------------------------------------

    async def _cached(self, path: str, parse):
        node = self._nodes.get(path)
        if node is None:
            node = _Node()
            # Watch first, then read: every change after the read is notified (the store's contract).
            with metadata_errors(f"watching the permissions at {path}"):
                node.watch = self.store.watch_data(path, lambda event, p=path: self._changed(p))
            self._nodes[path] = node
            self._evict()
        else:
            self._nodes.move_to_end(path)
        while not node.fresh:
            if node.loading is None:
                node.loading = asyncio.get_running_loop().create_task(self._load(node, path, parse))
            await asyncio.shield(node.loading)
        return node.value

    async def _load(self, node: _Node, path: str, parse) -> None:
        generation = node.generation
        try:
            with metadata_errors(f"reading the permissions at {path}"):
                try:
                    data, _ = await self.store.get(path)
                    value = parse(_document(path, data))
                except NoNodeError:
                    value = None
            if node.generation == generation:  # else it changed while we read: read again
                node.value, node.fresh = value, True
        finally:
            node.loading = None

    def _evict(self) -> None:
        while len(self._nodes) > MAX_CACHED_NODES:
            path, node = next(iter(self._nodes.items()))
            if node.loading is not None:
                return  # the oldest is being read; trimmed on a later miss
            del self._nodes[path]
            node.watch.cancel()

    def _changed(self, path: str) -> None:
        node = self._nodes.get(path)
        if node is None:
            return
        node.generation += 1
        node.fresh = False
        self.changes += 1
        self._spawn(self.recheck(path))

    def _session_changed(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            return
        for node in self._nodes.values():
            node.generation += 1
            node.fresh = False
        self.changes += 1
        self._spawn(self.recheck(POLICIES_ROOT))

    # ---- live producers and consumers --------------------------------------------

    async def recheck(self, path: str) -> int:
        """Close every producer and consumer of the loaded topics under ``path`` (a tenant's or namespace's node,
        or the root) whose role lost its permission. Returns how many were closed."""
        if not self.enabled:
            return 0
        prefix = path[len(POLICIES_ROOT):].strip("/")
        closed = 0
        for topic in list(self.service.topics.values()):
            ns = topic.name.namespace_name
            if prefix and prefix not in (ns.tenant, f"{ns.tenant}/{ns.namespace}"):
                continue
            try:
                closed += await self._recheck_topic(topic)
            except (BrokerError, MetadataError) as exc:
                # Not knowing is not a revocation: the clients stay, and the next change checks them again.
                log.warning("re-checking the permissions on %s: %s", topic.name, exc)
        return closed

    async def _recheck_topic(self, topic) -> int:
        closed = 0
        for producer in list(topic.producers):
            role = effective_role(producer.connection)
            if not await self.allowed(role, topic.name, Need.PRODUCE):
                log.info("closing producer %r on %s: role %r may no longer produce", producer.name, topic.name, role)
                topic.remove_producer(producer)
                producer.connection.out.close_producer(producer.producer_id)
                closed += 1
        for sub in list(topic.subscriptions.values()):
            for consumer in sub.consumers:
                role = effective_role(consumer.connection)
                if not await self.allowed(role, topic.name, Need.CONSUME):
                    log.info("closing consumer %r of %s on %s: role %r may no longer consume", consumer.name,
                             sub.name, topic.name, role)
                    await sub.remove_consumer(consumer)  # first: nothing more is dispatched to it
                    consumer.close(notify=True)
                    closed += 1
        return closed

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for node in self._nodes.values():
            if node.watch is not None:
                node.watch.cancel()
        self._nodes.clear()
        for task in list(self._tasks):
            task.cancel()


def _document(path: str, data: bytes) -> dict:
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        # Not written by an admin route (a bare parent node, a hand edit): it grants nothing.
        log.warning("%s does not hold a JSON object; it grants nothing", path)
        return {}
    return doc


def _admin_roles(doc: dict) -> frozenset[str]:
    roles = doc.get("adminRoles") or []
    return frozenset(r for r in roles if isinstance(r, str))


def _auth_policies(doc: dict) -> dict:
    try:
        return normalize_auth_policies(doc.get("auth_policies") or {})
    except BrokerError as exc:
        # Written by hand or by a newer version: grant nothing from it rather than fail every check.
        log.warning("ignoring malformed auth_policies: %s", exc)
        return normalize_auth_policies({})
