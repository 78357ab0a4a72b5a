"""Namespace bundles and which broker owns them (Pulsar's NamespaceService / OwnershipCache).

How it works: a namespace's topic-hash space is cut into bundles
(broker/ownership/bundles.py); the boundaries live in the namespace's local policies
(broker/ownership/resources.py), the default equal ranges until a first split. A broker
owns a bundle by creating the *ephemeral* node
``/namespace/<tenant>/<ns>/<0xLO_0xHI>`` holding its URLs; exactly one create
can succeed, so brokers racing for a bundle end with one owner. The node
lives as long as the broker's metadata session: when the broker dies or is
partitioned past the session timeout the node disappears and another broker
may take the bundle. A broker proven dead sooner (broker/ownership/takeover.py: every
advertised port refuses connections) loses the node at once, by a delete
conditional on the version read from its session; an owner that finds its
node deleted under a live session stops serving that bundle at once. A
broker that loses its session stops serving every
topic at once (the service unloads them); the new owner's managed-ledger open
fences the old owner's ledgers, so nothing the old owner writes afterwards is
ever read.

Boundaries are cached per namespace and re-read when a bundle looks unowned
(it may have been split) and after every successful acquisition: a broker
whose cache predates a split may create the node of the split parent, and
then finds the boundaries moved, deletes the node and tries again. That is
enough because the splitting broker (``split``) owns both children *before*
it publishes the new boundaries (one conditional write) and deletes the
parent's node only after: whoever creates the parent's node afterwards reads
the new boundaries.

Brokers register ephemerally under ``/loadbalance/brokers/<id>`` with their
URLs and ``LoadReport``; an unowned bundle goes to the broker that
broker/loadbalance/broker_choice.py chooses.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
import urllib.parse
from dataclasses import dataclass
from typing import Awaitable, Callable

from broker.errors import BrokerMetadataError, ServiceNotReadyError, metadata_errors
from broker.loadbalance.broker_choice import DEFAULT_WEIGHTS, LoadReport, PlacementWeights, choose_broker
from broker.ownership.bundles import BundleRange, NamespaceBundles, bundle_name
from broker.ownership.listeners import AdvertisedListener, listener_urls
from broker.ownership.resources import ConflictError, NotFoundError, Resources
from broker.ownership.takeover import OwnerEvidence, Verdict, takeover_verdict
from magnetar.topic_name import NamespaceName, TopicName
from storage.errors import BadVersionError, MetadataError, NodeExistsError, NoNodeError
from storage.metadata import EventType, MetadataStore, SessionState, Watch, WatchEvent

log = logging.getLogger(__name__)

NAMESPACE_ROOT = "/namespace"
BROKERS_ROOT = "/loadbalance/brokers"
REGISTER_ATTEMPTS = 5  # each race with a previous incarnation's expiring node costs one attempt
MAX_ATTEMPTS = 5  # of an acquisition or split that keeps meeting concurrent boundary changes


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's addresses as it publishes them (registration and ownership nodes). ``service_url`` is None when
    the plain Pulsar port is off (TLS only); ``listeners`` are its advertised listeners (broker/ownership/listeners.py),
    so any broker can answer a lookup for this one under the listener name the client asked for."""

    broker_id: str
    service_url: str | None
    web_service_url: str | None
    service_url_tls: str | None = None
    web_service_url_tls: str | None = None
    listeners: tuple[AdvertisedListener, ...] = ()

    def to_json(self) -> dict:
        doc = {"brokerId": self.broker_id, "nativeUrl": self.service_url, "httpUrl": self.web_service_url}
        if self.service_url_tls:
            doc["nativeUrlTls"] = self.service_url_tls
        if self.web_service_url_tls:
            doc["httpUrlTls"] = self.web_service_url_tls
        if self.listeners:
            doc["advertisedListeners"] = {listener.name: listener.to_json() for listener in self.listeners}
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> "BrokerInfo":
        listeners = tuple(AdvertisedListener.from_json(name, value)
                          for name, value in (doc.get("advertisedListeners") or {}).items())
        return cls(doc["brokerId"], doc.get("nativeUrl"), doc.get("httpUrl"), doc.get("nativeUrlTls"),
                   doc.get("httpUrlTls"), listeners)

    def lookup_urls(self, listener_name: str | None = None) -> tuple[str | None, str | None]:
        """(pulsar://, pulsar+ssl://) a lookup answers for this broker, under ``listener_name`` when the client
        named one. Raises ServiceNotReadyError for a listener this broker does not have."""
        return listener_urls({listener.name: listener for listener in self.listeners},
                             (self.service_url, self.service_url_tls), listener_name, self.broker_id)

    def web_url(self, secure: bool) -> str | None:
        """The HTTP base URL to send a caller to: https for one that came over https (when this broker serves it),
        else plain http, else https (a broker that serves only https)."""
        if secure and self.web_service_url_tls:
            return self.web_service_url_tls
        return self.web_service_url or self.web_service_url_tls


async def may_be_alive(broker: BrokerInfo, timeout_s: float = 1.0) -> bool:
    """False only with proof that ``broker``'s process is gone: every advertised port (Pulsar, then HTTP; plain and TLS) refuses a
    connection. Its ownership nodes live until its session expires. A port that accepts, a timeout or any other
    error proves nothing (a paused broker's kernel still accepts connections), so each counts as alive."""
    for url in (broker.service_url, broker.service_url_tls, broker.web_service_url, broker.web_service_url_tls):
        if not url:
            continue
        parts = urllib.parse.urlsplit(url)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port), timeout_s)
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError, asyncio.TimeoutError, TimeoutError):
            return True
        writer.close()
        return True
    return False


def bundle_key(path: str) -> str:
    """``/namespace/t/ns/0xLO_0xHI`` -> ``t/ns/0xLO_0xHI`` (how load reports name bundles)."""
    return path[len(NAMESPACE_ROOT) + 1:]


class Ownership:
    """``owns_address``: this process listens on the address ``me.broker_id`` names, so a node recorded under our
    id by another session belongs to a dead previous incarnation (see broker/ownership/takeover.py). ``on_bundle_lost(path)``
    is called when another broker took an owned bundle while our session lived (we were judged dead)."""

    def __init__(self, store: MetadataStore, me: BrokerInfo, default_bundles: int, on_session_lost, *,
                 load_source: Callable[[], LoadReport] = LoadReport, weights: PlacementWeights = DEFAULT_WEIGHTS,
                 placement_hold_s: float = 10.0, owner_expiry_wait_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 probe: Callable[[BrokerInfo], Awaitable[bool]] | None = None,
                 owns_address: bool = False, on_bundle_lost: Callable[[str], None] | None = None,
                 takeover_hold_s: float = 30.0):
        self.store = store
        self.me = me
        self.resources = Resources(store)
        self.default_bundles = default_bundles
        self.owned: set[str] = set()
        # Owned bundles being unloaded (Pulsar's disabled OwnedBundle): their node is still ours, but no topic of
        # theirs may load here, or a client reconnecting during the unload would reload it on the old owner.
        self.unloading: set[str] = set()
        # False while the metadata connection is suspended and until ownership is re-verified: no writes then.
        self.writable = True
        self._on_session_lost = on_session_lost
        self._verifying: asyncio.Task | None = None
        self._bundles: dict[NamespaceName, tuple[NamespaceBundles, int]] = {}  # with the version read
        self._split_lock = asyncio.Lock()
        self._load_source = load_source
        self._weights = weights
        self._placed: dict[str, tuple[str, float]] = {}  # bundle key -> (broker id, when) sent there by us
        self._placement_hold_s = placement_hold_s
        self._clock = clock
        self.owner_expiry_wait_s = owner_expiry_wait_s  # how long to wait for a dead owner's node to expire
        self.reachable = probe or may_be_alive  # False only with proof of death
        self._owns_address = owns_address
        self._on_bundle_lost = on_bundle_lost or (lambda path: None)
        self._takeover_hold_s = takeover_hold_s
        self._lost_to_takeover_at: float | None = None
        self._owned_watches: dict[str, Watch] = {}  # tells us when another broker deletes an owned bundle's node
        self._checks: set[asyncio.Task] = set()
        self._report_due = False
        self._reporting: asyncio.Task | None = None
        # Cleared when the session is lost, set when the store is CONNECTED on its new one: a registration made
        # in between would still run on the expired session and fail with SessionExpiredError.
        self._session_live = asyncio.Event()
        self._session_live.set()
        store.add_session_listener(self._session_changed)

    # ---- registration and load -------------------------------------------------------

    def report(self) -> LoadReport:
        load, owned = self._load_source(), tuple(sorted(bundle_key(p) for p in self.owned))
        return dataclasses.replace(load, bundles=owned,
                                   bundle_stats={k: s for k, s in load.bundle_stats.items() if k in owned})

    def report_json(self) -> dict:
        """What ``/loadbalance/brokers/<id>`` holds: this broker's URLs and its load report."""
        return {**self.me.to_json(), **self.report().to_json()}

    def _report_doc(self) -> bytes:
        return json.dumps(self.report_json()).encode()

    async def register(self) -> None:
        """Register this broker (ephemerally); after a lost session, once the new session exists."""
        await self._session_live.wait()
        await self._register()

    async def _register(self) -> None:
        path = f"{BROKERS_ROOT}/{self.me.broker_id}"
        # A previous incarnation's node (kill -9, then a restart on the same address) vanishes by itself when its
        # session expires, which may happen between any two of the steps below: then look again, never fail the
        # start on it (nemesis seed 7: a restart refused with NoNodeError).
        for _ in range(REGISTER_ATTEMPTS):
            try:
                await self.store.create(path, self._report_doc(), ephemeral=True, make_parents=True)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = await self.store.get(path)
                if stat.ephemeral_owner != self.store.session_id and self._owns_address:
                    # A previous incarnation's registration, which would vanish with its session: replace it now.
                    await self.store.delete(path, stat.version)
                    continue
                await self.store.set(path, self._report_doc())  # our own node from this session (a re-registration)
                return
            except (NoNodeError, BadVersionError):
                continue  # it changed meanwhile: look again
        await self.store.set(path, self._report_doc())

    async def report_load(self) -> None:
        try:
            await self.store.set(f"{BROKERS_ROOT}/{self.me.broker_id}", self._report_doc())
        except NoNodeError:
            await self.register()

    def _report_soon(self) -> None:
        """Publish the load report now that our bundles changed (one write at a time; changes meanwhile coalesce)."""
        self._report_due = True
        if self._reporting is None or self._reporting.done():
            self._reporting = asyncio.get_running_loop().create_task(self._report_while_due())

    async def _report_while_due(self) -> None:
        while self._report_due:
            self._report_due = False
            try:
                await self.report_load()
            except MetadataError as exc:
                log.warning("broker %s: load report failed: %s", self.me.broker_id, exc)

    async def live_brokers(self) -> list[tuple[BrokerInfo, LoadReport]]:
        out = []
        try:
            children = await self.store.children(BROKERS_ROOT)
        except NoNodeError:
            return []
        for child in sorted(children):
            try:
                data, _ = await self.store.get(f"{BROKERS_ROOT}/{child}")
            except NoNodeError:
                continue
            doc = json.loads(data)
            out.append((BrokerInfo.from_json(doc), LoadReport.from_json(doc)))
        return out

    async def place(self, path: str) -> BrokerInfo:
        """The live broker that should take the unowned bundle at ``path`` (see broker/loadbalance/broker_choice.py). A broker
        that refuses connections is passed over: a killed broker's report lingers until its session expires."""
        brokers = {info.broker_id: (info, report) for info, report in await self.live_brokers()}
        reports = {b: report for b, (_, report) in brokers.items()}
        now, key = self._clock(), bundle_key(path)
        self._placed = {k: (b, t) for k, (b, t) in self._placed.items()
                        if now - t < self._placement_hold_s and b in reports and k not in reports[b].bundles}
        pending = collections.Counter(b for k, (b, _) in self._placed.items() if k != key)
        while reports:
            chosen = brokers[choose_broker(reports, key, pending, self._weights)][0]
            if chosen.broker_id == self.me.broker_id or await self.reachable(chosen):
                self._placed[key] = (chosen.broker_id, now)
                return chosen
            del reports[chosen.broker_id]
        return self.me

    # ---- boundaries ----------------------------------------------------------------------

    async def namespace_bundles(self, ns: NamespaceName, *, fresh: bool = False) -> NamespaceBundles:
        if fresh or ns not in self._bundles:
            await self._refresh(ns)
        return self._bundles[ns][0]

    async def _refresh(self, ns: NamespaceName) -> bool:
        """Re-read the namespace's boundaries; True when they differ from what we had cached."""
        before = self._bundles.get(ns)
        self._bundles[ns] = await self.resources.namespace_bundles(ns, self.default_bundles)
        return before != self._bundles[ns]

    @staticmethod
    def bundle_path(ns: NamespaceName, bundle: BundleRange) -> str:
        return f"{NAMESPACE_ROOT}/{ns.tenant}/{ns.namespace}/{bundle_name(bundle)}"

    async def path_of(self, topic: TopicName) -> str:
        bundles = await self.namespace_bundles(topic.namespace_name)
        return self.bundle_path(topic.namespace_name, bundles.bundle_of(topic))

    async def owns(self, topic: TopicName) -> bool:
        path = await self.path_of(topic)
        return path in self.owned and path not in self.unloading

    def owned_bundles(self, ns: NamespaceName) -> list[str]:
        prefix = f"{NAMESPACE_ROOT}/{ns.tenant}/{ns.namespace}/"
        return sorted(p[len(prefix):] for p in self.owned if p.startswith(prefix))

    # ---- owners ----------------------------------------------------------------------------

    async def owner_at(self, path: str) -> BrokerInfo | None:
        node = await self._node(path)
        return None if node is None else node[0]

    async def _node(self, path: str) -> tuple[BrokerInfo, int, int] | None:
        """The owner recorded at ``path``, the session that holds the node and its version; None when unowned."""
        with metadata_errors(f"reading the owner of bundle {path}"):
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                return None
        return BrokerInfo.from_json(json.loads(data)), stat.ephemeral_owner, stat.version

    async def owner_of(self, topic: TopicName) -> BrokerInfo | None:
        owner = await self.owner_at(await self.path_of(topic))
        if owner is None and await self._refresh(topic.namespace_name):
            owner = await self.owner_at(await self.path_of(topic))  # the bundle was split meanwhile
        return owner

    async def try_acquire(self, topic: TopicName) -> BrokerInfo:
        """Own the topic's bundle if nobody does; returns the owner (this broker or the one that won)."""
        for _ in range(MAX_ATTEMPTS):
            path = await self.path_of(topic)
            if path in self.owned:
                self.check_not_unloading(path)
                return self.me
            with metadata_errors(f"acquiring the bundle of {topic}"):
                try:
                    await self.store.create(path, json.dumps(self.me.to_json()).encode(), ephemeral=True, make_parents=True)
                except NodeExistsError:
                    node = await self._node(path)
                    if node is None:  # released between our create and our read: try again
                        continue
                    owner, session, _ = node
                    if session == self.store.session_id:
                        self._adopt(path)  # our own node, e.g. from before a restart of this object
                        return self.me
                    if owner.broker_id != self.me.broker_id:
                        return owner
                    # A previous incarnation of this broker (killed and restarted on the same address within its
                    # session timeout): removed now when we hold the address, else it goes with that session.
                    if not await self.free_if_owner_dead(path):
                        raise ServiceNotReadyError(f"bundle {path} is still held by a previous session of this broker")
                    continue
            if await self._refresh(topic.namespace_name) and await self.path_of(topic) != path:
                await self._delete(path)  # we took a bundle that a split has replaced: not a bundle any more
                continue
            self._adopt(path)
            log.info("broker %s now owns bundle %s", self.me.broker_id, path)
            self._report_soon()
            return self.me
        raise BrokerMetadataError(f"the bundles of {topic.namespace_name} kept changing while acquiring {topic}")

    async def wait_released(self, path: str, timeout_s: float) -> bool:
        """Wait until nobody owns the bundle at ``path`` (e.g. its dead owner's session expired); False on timeout."""
        gone = asyncio.Event()
        watch = self.store.watch_data(path, lambda event: gone.set())
        try:
            deadline = self._clock() + timeout_s
            while await self.owner_at(path) is not None:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                gone.clear()
                try:
                    await asyncio.wait_for(gone.wait(), remaining)
                except asyncio.TimeoutError:
                    pass  # read once more, then give up
            return True
        finally:
            watch.cancel()

    async def free_if_owner_dead(self, path: str) -> bool:
        """Settle a bundle whose node another session holds: True when it is unowned now, False while a live
        owner (or we) hold it. An owner proven dead (broker/ownership/takeover.py) loses its node at once, by a delete
        conditional on the version read from that same session; otherwise, when the verdict is to wait, this
        waits up to ``owner_expiry_wait_s`` for the session to expire. Raises BrokerMetadataError."""
        for _ in range(MAX_ATTEMPTS):
            node = await self._node(path)
            if node is None:
                return True
            owner, session, _ = node
            same_id, same_session = owner.broker_id == self.me.broker_id, session == self.store.session_id
            refused = not same_id and not same_session and not await self.reachable(owner)
            verdict = takeover_verdict(OwnerEvidence(same_session, same_id, self._owns_address, refused),
                                       self._clock(), self._lost_to_takeover_at, self._takeover_hold_s)
            if verdict in (Verdict.OURS, Verdict.LIVE):
                return False
            if verdict is Verdict.WAIT_FOR_EXPIRY:
                return await self.wait_released(path, self.owner_expiry_wait_s)
            # Read again after the probe, so the delete is conditional on a version read just now from the same
            # session: a node another broker created meanwhile has another session and is decided afresh.
            again = await self._node(path)
            if again is None:
                return True
            if again[1] != session:
                continue
            with metadata_errors(f"taking bundle {path} over from broker {owner.broker_id}"):
                try:
                    await self.store.delete(path, again[2])
                except NoNodeError:
                    return True
                except BadVersionError:
                    continue
            log.warning("broker %s removed bundle %s from broker %s (session 0x%x): %s", self.me.broker_id, path,
                        owner.broker_id, session, "a previous incarnation of this broker" if same_id
                        else "every advertised port refused a connection")
            return True
        return False

    # ---- owned bundles: our nodes, watched ------------------------------------------------

    def _adopt(self, path: str) -> None:
        self.owned.add(path)
        if path not in self._owned_watches:
            self._owned_watches[path] = self.store.watch_data(path, self._owned_node_changed)

    def _drop(self, path: str) -> None:
        self.owned.discard(path)
        self.unloading.discard(path)
        watch = self._owned_watches.pop(path, None)
        if watch is not None:
            watch.cancel()

    def _owned_node_changed(self, event: WatchEvent) -> None:
        if event.path in self.owned and event.type in (EventType.DELETED, EventType.CHANGED):
            task = asyncio.get_running_loop().create_task(self._check_still_ours(event.path))
            self._checks.add(task)
            task.add_done_callback(self._checks.discard)

    async def _check_still_ours(self, path: str) -> None:
        """Another broker deleted an owned bundle's node while our session lives (it judged us dead): stop serving
        the bundle now rather than at the first fenced write, and take nothing over by probe for a while."""
        if path not in self.owned or not self.writable:
            return  # released meanwhile, or a suspension, after which ownership is re-verified anyway
        try:
            node = await self._node(path)
        except BrokerMetadataError:
            return
        if path not in self.owned or (node is not None and node[1] == self.store.session_id):
            return
        self._drop(path)
        self._lost_to_takeover_at = self._clock()
        log.warning("broker %s lost bundle %s to broker %s while its session lived", self.me.broker_id, path,
                    node[0].broker_id if node else "(none yet)")
        self._report_soon()
        self._on_bundle_lost(path)

    def disable(self, path: str) -> None:
        """Start unloading an owned bundle: from now on no topic of it loads here (``release`` ends it)."""
        if path in self.owned:
            self.unloading.add(path)

    def check_not_unloading(self, path: str) -> None:
        """Raises ServiceNotReadyError (clients retry the lookup) while the bundle at ``path`` is being unloaded."""
        if path in self.unloading:
            raise ServiceNotReadyError(f"bundle {bundle_key(path)} is being unloaded; look the topic up again")

    async def release(self, path: str) -> None:
        self.unloading.discard(path)
        if path in self.owned:
            self._drop(path)
            await self._delete(path)
            self._report_soon()

    async def close(self) -> None:
        """Hand every bundle off at once (not after a session timeout) and stop reporting."""
        for path in list(self.owned):
            self._drop(path)
            await self._delete(path)
        self.unloading.clear()
        if self._reporting is not None:
            self._reporting.cancel()

    async def _delete(self, path: str) -> None:
        try:
            await self.store.delete(path)
        except (NoNodeError, MetadataError):
            pass  # gone already (or the session is): either way it is not ours

    # ---- split -------------------------------------------------------------------------------

    async def split(self, ns: NamespaceName, bundle: BundleRange) -> tuple[str, str]:
        """Split ``bundle`` of ``ns``, which this broker owns, at its midpoint; this broker owns both halves.
        Returns the halves' node paths.

        Both halves' nodes are created first (nobody consults them before the boundaries change), then the new
        boundaries are published with one conditional write, then the parent's node goes. A concurrent split
        elsewhere in the namespace fails the write on version: the halves are dropped and the split starts
        again from the boundaries as they are now. Raises NotFoundError (not a bundle of ``ns``),
        ConflictError (not owned here, or the boundaries kept changing), InvalidBundleError (too small)."""
        async with self._split_lock:  # one split at a time here; other brokers are stopped by the version
            for _ in range(MAX_ATTEMPTS):
                await self._refresh(ns)
                bundles, version = self._bundles[ns]
                if bundle not in bundles:
                    raise NotFoundError(f"{bundle_name(bundle)} is not a bundle of {ns}; its bundles: {bundles.names()}")
                parent = self.bundle_path(ns, bundle)
                if parent not in self.owned or parent in self.unloading:
                    raise ConflictError(f"bundle {bundle_name(bundle)} of {ns} is not owned by broker {self.me.broker_id}")
                new, low, high = bundles.split(bundle)
                halves = (self.bundle_path(ns, low), self.bundle_path(ns, high))
                for half in halves:
                    await self._own_new(half)
                try:
                    new_version = await self.resources.write_namespace_bundles(ns, new, version)
                except ConflictError:
                    new_version = None
                except BrokerMetadataError:  # the write may have been applied: find out
                    await self._refresh(ns)
                    new_version = self._bundles[ns][1] if self._bundles[ns][0] == new else None
                if new_version is None:
                    for half in halves:
                        await self._delete(half)
                    continue
                self._bundles[ns] = (new, new_version)
                for half in halves:
                    self._adopt(half)
                self._drop(parent)
                await self._delete(parent)
                log.info("broker %s split bundle %s into %s and %s", self.me.broker_id, parent, *halves)
                self._report_soon()
                return halves
            raise ConflictError(f"the bundles of {ns} kept changing during the split of {bundle_name(bundle)}; retry")

    async def _own_new(self, path: str) -> None:
        with metadata_errors(f"owning the new bundle {path}"):
            try:
                await self.store.create(path, json.dumps(self.me.to_json()).encode(), ephemeral=True, make_parents=True)
            except NodeExistsError:
                node = await self._node(path)  # ours from an attempt that met a concurrent split, or someone else's
                if node is not None and node[1] != self.store.session_id:
                    raise ConflictError(f"bundle {path} is already owned by broker {node[0].broker_id}") from None

    # ---- session ----------------------------------------------------------------------------

    async def _reverify(self) -> None:
        """After a suspension: keep only bundles whose node is still ours, then accept writes again."""
        for path in list(self.owned):
            try:
                node = await self._node(path)
            except BrokerMetadataError:
                node = None
            if node is None or node[1] != self.store.session_id:
                self._drop(path)
                self._on_bundle_lost(path)  # its topics are another broker's now: stop serving them
        self.writable = True
        log.info("broker %s re-verified %d bundles after a metadata suspension", self.me.broker_id, len(self.owned))

    def _session_changed(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            self._session_live.set()
        if state is SessionState.SUSPENDED:
            log.warning("broker %s: metadata connection suspended; writes wait until ownership is re-verified",
                        self.me.broker_id)
            self.writable = False
            return
        if state is SessionState.CONNECTED and not self.writable:
            self._verifying = asyncio.get_running_loop().create_task(self._reverify())
            return
        if state is SessionState.LOST:
            self.writable = True  # nothing is ours any more; new acquisitions start from scratch
            log.warning("broker %s lost its metadata session: its %d bundles are no longer its own",
                        self.me.broker_id, len(self.owned))
            for path in list(self.owned):
                self._drop(path)
            self.unloading.clear()
            self._session_live.clear()
            self._on_session_lost()
