"""The broker service: its topics, the protocol listener, and the answers to lookups.

``BrokerService.start(config, store=None)`` opens the metadata store (unless
given one, as standalone does), the ledger client and the managed-ledger
factory, makes sure ``public/default`` exists (only with authorization off: see
``_ensure_default_namespace``), and listens on the Pulsar port.
Topics load on first use: a topic's managed ledger opens by fencing the
previous owner's last ledger, so a broker that loads a topic is its only
writer. Loads of the same topic are shared, never run twice.

Several brokers share the work through bundle ownership (broker/ownership/ownership.py):
a topic loads only on the broker that owns its bundle, and LOOKUP answers
with the owner (Connect or Redirect) or assigns the bundle to the broker that
broker/loadbalance/broker_choice.py chooses from the load reports. A lookup whose owner is
proven dead (every advertised port refuses a connection: killed, its
ownership node not yet expired) removes that node at once and places the
bundle afresh (broker/ownership/takeover.py), instead of sending the client to a dead
address or waiting for the owner's session to expire.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from broker.config import BrokerConfig
from broker.errors import (
    BrokerError, NotAllowedError, ServiceNotReadyError, TopicNotFoundError, TopicServedElsewhereError, metadata_errors,
    persistence_errors,
)
from broker.loadbalance.broker_choice import BundleStats, BundleStatsSampler, LoadReport, LoadSampler, TopicSample
from broker.ownership.bundles import BundleRange
from broker.topics.throttling import broker_publish_throttle
from broker.ownership.clusters import ClusterData, Clusters
from broker.ownership.load_manager import LoadManager
from broker.ownership.ownership import BrokerInfo, Ownership, bundle_key
from broker.ownership.policy_watch import PolicyWatch
from broker.ownership.resources import ConflictError, NamespacePolicies, Resources
from broker.schemas.registry import SchemaRegistry
from broker.security.authentication import AuthenticationService
from broker.security.tls import serve_tls, server_context
from broker.security.authorization import AuthorizationService
from broker.server.connection import ServerConnection
from broker.server.limits import ConnectionLimits, PublishBuffer
from broker.subscriptions.reads_in_flight import ReadsInFlight
from broker.topics import lifecycle
from broker.topics.lifecycle_policies import inactive_topic_deletable, subscription_expired
from broker.topics.non_persistent import NonPersistentTopic
from broker.topics.persistent import PersistentTopic
from broker.stats_window import TopicStatsSampler
from magnetar.topic_name import NamespaceName, TopicName
from storage.client import ClientConfig
from storage.client.api import LedgerClient
from storage.errors import MetadataError, StorageError
from storage.managed_ledger import ManagedLedgerFactory
from storage.managed_ledger.passwords import cluster_secret, parse_secret, stored_secret
from storage.metadata import MetadataStore, open_store
from storage.shared_load import SharedLoads

log = logging.getLogger(__name__)

VERSION = "Magnetar 0.1"


# maxNumPartitionsPerPartitionedTopic = 0 is Pulsar's "unlimited"; a partitioned topic's admin requests act on every
# partition at once, so the count a client may ask for is bounded even then.
DEFAULT_MAX_PARTITIONS = 10_000


class BrokerService:
    version = VERSION

    def __init__(self, config: BrokerConfig, store: MetadataStore, client: LedgerClient, factory: ManagedLedgerFactory,
                 *, owns_store: bool):
        self.config = config
        self.store = store
        self.client = client
        self.factory = factory
        self.resources = Resources(store)
        self.schemas = SchemaRegistry(self)
        self.policy_watch = PolicyWatch(store, self.resources)  # namespace policy changes reach loaded topics
        self.topics: dict[str, PersistentTopic] = {}
        self.non_persistent: dict[str, NonPersistentTopic] = {}  # apart: the storage upkeep loops skip them
        self._loading: SharedLoads[PersistentTopic] = SharedLoads()
        self.connections: set[ServerConnection] = set()
        self.connection_limits = ConnectionLimits(config.broker_max_connections, config.broker_max_connections_per_ip)
        self.publish_buffer = PublishBuffer(config.max_message_publish_buffer_size_mb * 1024 * 1024)
        self.reads_in_flight = ReadsInFlight(config.managed_ledger_max_reads_in_flight_size_mb * 1024 * 1024)
        self.publish_rate = broker_publish_throttle(config, lambda: [c for c in self.connections if c.producers])
        self._server: asyncio.AbstractServer | None = None
        self._owns_store = owns_store
        self._tasks: set[asyncio.Task] = set()
        self.port = config.port
        self.tls_port = config.tls_port
        self.ssl_context = server_context(config)  # shared by pulsar+ssl:// and https; bad files fail here
        self._servers: list[asyncio.AbstractServer] = []
        self.ownership: Ownership | None = None
        self._load_sampler = LoadSampler()
        self._rates = (0.0, 0.0, 0.0)  # msg/s in, msg/s out, CPU % at the last load sample
        self._bundle_sampler = BundleStatsSampler()
        self.bundle_stats: dict[str, BundleStats] = {}  # by bundle key, at the last load sample
        self.topic_stats = TopicStatsSampler(self)  # the window /metrics rates come from (broker/stats_window.py)
        self.load_manager: LoadManager | None = None
        self.authentication = AuthenticationService(False, {})  # start() replaces it with the configured one
        self.authorization = AuthorizationService(self)
        self.stream_api = None  # broker/streams/server.py, when stream_port is set

    @classmethod
    async def start(cls, config: BrokerConfig, store: MetadataStore | None = None) -> "BrokerService":
        authentication = AuthenticationService.from_config(config)  # reads keys first: a bad one stops the start
        owns = store is None
        server_context(config)  # a certificate or key that cannot be loaded refuses the start before anything opens
        if store is None:
            store = await open_store(config.metadata_store_url, session_timeout_s=config.metadata_session_timeout_s)
        password_secret, previous_secrets = await _password_secrets(config, store)
        client = await LedgerClient.open(store, ClientConfig(**config.ledger_client_fields()))
        factory = ManagedLedgerFactory(store, client, password_secret=password_secret,
                                       previous_password_secrets=previous_secrets)
        service = cls(config, store, client, factory, owns_store=owns)
        service.authentication = authentication
        await service._ensure_default_namespace()
        await service._listen()
        await Clusters(store).ensure(config.cluster_name, service.cluster_data())
        service.ownership = Ownership(
            store, service.broker_info(),
            config.default_number_of_namespace_bundles, service._session_lost, load_source=service.load_report,
            owner_expiry_wait_s=2 * config.metadata_session_timeout_s, owns_address=True,
            on_bundle_lost=service._bundle_lost, takeover_hold_s=config.metadata_session_timeout_s)
        await service.ownership.register()
        if config.stream_port is not None:
            from broker.streams.server import StreamServer
            service.stream_api = await StreamServer.start(service)
        for server in service._servers:
            await server.start_serving()
        service.spawn(service._maintain())
        service.spawn(service._every(config.message_expiry_check_interval_s, "message expiry", lifecycle.expire_by_ttl))
        service.spawn(service._every(config.backlog_quota_check_interval_s, "backlog quota",
                                     lifecycle.enforce_backlog_quota))
        service.spawn(service._every(config.subscription_expiry_check_interval_s, "subscription expiry",
                                     service._expire_subscriptions))
        service.spawn(service._every(config.broker_delete_inactive_topics_frequency_s, "inactive topics",
                                     service._delete_if_inactive))
        service.spawn(service._report_load())
        service.spawn(service.topic_stats.run())
        service.load_manager = LoadManager(service)
        service.load_manager.start()
        log.info("broker serving the Pulsar protocol on %s (%s)", config.host,
                 ", ".join(filter(None, (service.service_url, service.service_url_tls))))
        return service

    async def _ensure_default_namespace(self) -> None:
        """Create tenant ``public`` and namespace ``public/default`` at start, as Pulsar standalone does, unless
        authorization is on. With authorization on, who may use them is the operator's decision: a superuser
        creates them with its grants (``PUT /admin/v2/tenants/public`` and ``PUT /admin/v2/namespaces/public/default``
        with ``auth_policies``), as on a secured Pulsar standalone, whose setup scripts (the official Python
        client's CI among them) expect those PUTs to create them, not to answer 409. Nothing that already exists is
        touched either way."""
        if self.config.authorization_enabled:
            log.info("authorization is on: tenant public and namespace public/default are not created at start "
                     "(a superuser creates them with their grants)")
            return
        await self.resources.ensure_default_namespace(self.config.cluster_name)

    async def _listen(self) -> None:
        """Bind the plain and the TLS listener (each when configured); port 0 picks a free port."""
        loop = asyncio.get_running_loop()
        if self.config.port is not None:
            self._server = await loop.create_server(lambda: ServerConnection(self), self.config.host, self.config.port,
                                                   start_serving=False)
            self.port = self._server.sockets[0].getsockname()[1]
            self._servers.append(self._server)
        if self.config.tls_port is not None:
            tls_server = await serve_tls(lambda: ServerConnection(self), self.config.host, self.config.tls_port,
                                         self.ssl_context)
            self.tls_port = tls_server.sockets[0].getsockname()[1]
            self._servers.append(tls_server)

    @property
    def service_url(self) -> str | None:
        """As bound (port 0 resolved); None when the plain listener is off."""
        return None if self.port is None else f"pulsar://{self.config.advertised_address}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        return None if self.tls_port is None else f"pulsar+ssl://{self.config.advertised_address}:{self.tls_port}"

    def cluster_data(self) -> ClusterData:
        """This broker's URLs as its cluster's entry, made at start when the cluster has none (as Pulsar
        standalone initialises its cluster metadata)."""
        info = self.broker_info()
        return ClusterData(info.web_service_url, info.web_service_url_tls, info.service_url, info.service_url_tls)

    def broker_info(self) -> BrokerInfo:
        """What this broker publishes about itself (registration, ownership nodes). With advertised listeners its
        default URLs are the internal listener's, as in Pulsar: brokers and clients that name no listener use them."""
        config = self.config
        service_url, tls_url = self.service_url, self.service_url_tls
        web_url, https_url = config.web_service_url, config.web_service_url_tls
        internal = config.internal_listener
        if internal is not None:
            service_url, tls_url = internal.service_url, internal.service_url_tls
            web_url, https_url = internal.web_service_url or web_url, internal.web_service_url_tls or https_url
        broker_id = f"{config.advertised_address}:{self.port if self.port is not None else self.tls_port}"
        return BrokerInfo(broker_id, service_url, web_url, tls_url, https_url, config.listeners)

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- lookup --------------------------------------------------------------

    async def lookup(self, topic: TopicName, authoritative: bool = False) -> tuple[BrokerInfo, bool]:
        """(broker, owns it?) for ``topic``: the owner of its bundle (ourselves when we own or just took it),
        else the live broker chosen to take it, which the client asks again (authoritative) and which takes it."""
        await self._check_namespace(topic)
        me = self.ownership.me.broker_id
        owner = await self.ownership.owner_of(topic)
        if owner is not None and owner.broker_id == me:
            self.ownership.check_not_unloading(await self.ownership.path_of(topic))
        if owner is not None and owner.broker_id != me and not await self.ownership.reachable(owner):
            # Killed: its node would live until its session expires. With proof of death it goes now (and the
            # bundle is placed afresh), rather than send the client to a dead address.
            if await self.ownership.free_if_owner_dead(await self.ownership.path_of(topic)):
                owner = await self.ownership.owner_of(topic)
        if owner is None:
            candidate = await self.ownership.place(await self.ownership.path_of(topic))
            if not authoritative and candidate.broker_id != me:
                return candidate, False
            owner = await self.ownership.try_acquire(topic)
        return owner, True

    def load_report(self) -> LoadReport:
        rate_in, rate_out, cpu = self._rates
        return LoadReport(topics=len(self.topics) + len(self.non_persistent), connections=len(self.connections), msg_rate_in=rate_in,
                          msg_rate_out=rate_out, cpu_percent=cpu, bundle_stats=self.bundle_stats)

    async def _report_load(self) -> None:
        """Every ``load_report_interval_s``: sample rates, CPU and per-bundle stats, publish the load report
        (placement, the automatic split and the load shedder read it)."""
        while True:
            await asyncio.sleep(self.config.load_report_interval_s)  # a period, not synchronisation
            try:
                await self._sample_load()
                await self.ownership.report_load()
            except (MetadataError, BrokerError) as exc:
                log.warning("load report failed: %s", exc)

    def loaded_topics(self) -> list:
        """Every topic served here, persistent and non-persistent."""
        return [*self.topics.values(), *self.non_persistent.values()]

    async def _sample_load(self) -> None:
        topics = self.loaded_topics()
        self._rates = self._load_sampler.sample(sum(t.msg_in for t in topics), sum(t.msg_out for t in topics))
        samples = [TopicSample(str(t.name), bundle_key(await self.ownership.path_of(t.name)), t.msg_in, t.msg_out,
                               t.bytes_in, t.bytes_out, len(t.producers),
                               sum(len(s.consumers) for s in t.subscriptions.values())) for t in topics]
        self.bundle_stats = self._bundle_sampler.sample(samples)

    def _session_lost(self) -> None:
        """Our bundles are gone with the session: stop serving every topic now (clients look them up again)."""
        for topic in self.loaded_topics():
            self.spawn(self.unload_topic(topic.name))
        self.spawn(self.ownership.register())
        if self.stream_api is not None:
            self.spawn(self.stream_api.session_lost())

    def _bundle_lost(self, path: str) -> None:
        """Another broker took a bundle of ours while our session lived: stop serving its topics now."""
        self.spawn(self._unload_bundle_topics(path))
        if self.stream_api is not None:
            self.spawn(self.stream_api.service.unload_bundle(path))

    async def _unload_bundle_topics(self, path: str) -> None:
        for topic in self.loaded_topics():
            if await self.ownership.path_of(topic.name) == path:
                try:
                    await self.unload_topic(topic.name)
                except (BrokerError, StorageError) as exc:
                    log.warning("unloading %s of the lost bundle %s: %s", topic.name, bundle_key(path), exc)

    async def partitioned_metadata(self, topic: TopicName) -> int:
        """Partition count for PARTITIONED_METADATA; auto-creates a partitioned topic when configured so."""
        await self._check_namespace(topic)
        partitions = await self.resources.partition_count(topic)
        if partitions or topic.partition_index >= 0:
            return partitions
        if (
            self.config.allow_auto_topic_creation
            and self.config.allow_auto_topic_creation_type == "partitioned"
            and not await self._exists_unpartitioned(topic)
        ):
            try:
                await self.create_partitioned_topic(topic, self.config.default_num_partitions)
            except NotAllowedError:
                pass  # created concurrently
            return await self.resources.partition_count(topic)
        return 0

    async def create_partitioned_topic(self, topic: TopicName, partitions: int, *, update: bool = False) -> None:
        """Create (or grow) a partitioned topic within maxNumPartitionsPerPartitionedTopic and
        maxTopicsPerNamespace (its partitions count as topics)."""
        limit = self.config.max_num_partitions_per_partitioned_topic or DEFAULT_MAX_PARTITIONS
        if partitions > limit:
            raise NotAllowedError(f"{partitions} partitions requested for {topic}; at most {limit} "
                                  "(maxNumPartitionsPerPartitionedTopic; when it is 0, Magnetar's bound)")
        current = await self.resources.partition_count(topic) if update else 0
        await self._check_topic_count(topic, new_topics=partitions - current)
        if update:
            await self.resources.update_partitioned_topic(topic, partitions)
        else:
            await self.resources.create_partitioned_topic(topic, partitions)

    async def _exists_unpartitioned(self, topic: TopicName) -> bool:
        """A non-partitioned topic of this name exists: a managed ledger, or a non-persistent topic loaded here."""
        if topic.persistent:
            return await self.factory.exists(topic.managed_ledger_name)
        loaded = self.non_persistent.get(str(topic))
        return loaded is not None and not loaded.closed

    async def _check_topic_count(self, topic: TopicName, new_topics: int) -> None:
        limit = self.config.max_topics_per_namespace
        if not limit or new_topics <= 0:
            return
        ns = topic.namespace_name
        existing = sum(1 for t in await self.resources.topics(ns) if t.partition_index < 0)
        for parent in await self.resources.partitioned_topics(ns):
            existing += await self.resources.partition_count(parent)
        if existing + new_topics > limit:
            raise NotAllowedError(f"namespace {ns} has {existing} topics; {new_topics} more would exceed its "
                                  f"maximum of {limit} (maxTopicsPerNamespace)")

    async def _check_namespace(self, topic: TopicName) -> None:
        if not await self.resources.namespace_exists(topic.namespace_name):
            raise TopicNotFoundError(f"namespace {topic.namespace_name} does not exist (topic {topic})")

    # ---- topics --------------------------------------------------------------

    async def get_topic(self, name: TopicName, *, create: bool, admin: bool = False) -> PersistentTopic:
        """The loaded topic, loading it on first use; ``create`` allows auto-creation (``admin`` creates regardless)."""
        key = str(name)
        registry = self.topics if name.persistent else self.non_persistent
        topic = registry.get(key)
        if topic is not None and not topic.closed:
            return topic
        async def load() -> PersistentTopic:
            loaded = await (self._load if name.persistent else self._load_non_persistent)(name, create, admin)
            if not await self.ownership.owns(name):  # unloaded, split away or lost while it was loading
                await loaded.close(notify=True)
                raise ServiceNotReadyError(f"topic {name} moved while it was loading; look it up again")
            registry[key] = loaded
            return loaded

        return await self._loading.load(key, load)

    async def _load(self, name: TopicName, create: bool, admin: bool) -> PersistentTopic:
        await self._check_namespace(name)
        owner = await self.ownership.try_acquire(name)
        if owner.broker_id != self.ownership.me.broker_id:
            raise TopicServedElsewhereError(f"topic {name} is served by broker {owner.broker_id}; look it up again", owner)
        if await self.resources.partition_count(name) > 0:
            raise NotAllowedError(f"{name} is a partitioned topic; produce to and consume from its partitions")
        exists = await self.factory.exists(name.managed_ledger_name)
        if not exists:
            partitioned_parent = name.partition_index >= 0 and await self.resources.partition_count(name.partitioned_name) > 0
            if not partitioned_parent and not admin and not (create and self.config.allow_auto_topic_creation):
                raise TopicNotFoundError(f"topic {name} does not exist")
            if not partitioned_parent:
                await self._check_topic_count(name, new_topics=1)
        policies = await self.resources.get_policies(name.namespace_name)
        topic_policies = await self.resources.get_topic_policies(name)
        ml_config = self.managed_ledger_config_for(policies, topic_policies)
        with persistence_errors(f"opening topic {name} failed"):
            ml = await self.factory.open(name.managed_ledger_name, ml_config)
        try:
            topic = await PersistentTopic.load(self, name, ml, policies, topic_policies)
        except BaseException:
            await ml.close()
            raise
        self.policy_watch.attach(topic)
        return topic

    async def _load_non_persistent(self, name: TopicName, create: bool, admin: bool) -> NonPersistentTopic:
        """A non-persistent topic exists while it is loaded: "creating" it is loading it, and auto-creation (or an
        admin) allows that. It lives in the bundle of its name, like a persistent one."""
        await self._check_namespace(name)
        owner = await self.ownership.try_acquire(name)
        if owner.broker_id != self.ownership.me.broker_id:
            raise TopicServedElsewhereError(f"topic {name} is served by broker {owner.broker_id}; look it up again", owner)
        if await self.resources.partition_count(name) > 0:
            raise NotAllowedError(f"{name} is a partitioned topic; produce to and consume from its partitions")
        partitioned_parent = name.partition_index >= 0 and await self.resources.partition_count(name.partitioned_name) > 0
        if not partitioned_parent and not admin and not (create and self.config.allow_auto_topic_creation):
            raise TopicNotFoundError(f"topic {name} does not exist")
        policies = await self.resources.get_policies(name.namespace_name)
        topic = NonPersistentTopic(self, name, policies, await self.resources.get_topic_policies(name))
        self.policy_watch.attach(topic)
        return topic

    def non_persistent_topics_of(self, ns: NamespaceName) -> list[str]:
        """The namespace's non-persistent topics loaded on this broker (they are nowhere else on record)."""
        return [key for key, t in self.non_persistent.items() if t.name.namespace_name == ns and not t.closed]

    def managed_ledger_config_for(self, policies: NamespacePolicies, topic_policies: NamespacePolicies | None):
        return topic_ledger_config(self.config, policies, topic_policies)

    async def create_topic(self, name: TopicName) -> None:
        """Admin: create a non-partitioned topic (its managed ledger)."""
        if await self.factory.exists(name.managed_ledger_name) or await self.resources.partition_count(name):
            raise ConflictError(f"topic {name} already exists")
        await self.get_topic(name, create=True, admin=True)

    async def delete_topic(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a topic (its ledgers, cursors and own policies); ``force`` first disconnects its producers and
        consumers, which otherwise make the deletion NotAllowed."""
        topic = await self.get_topic(name, create=False)
        await topic.delete(force=force)
        self.topics.pop(str(name), None)
        if name.partition_index < 0:  # a partition shares its parent's policies and schema
            await self.resources.delete_topic_policies(name)
            await self.schemas.delete(name, force=True)

    async def unload_bundle(self, bundle_path: str) -> int:
        """Close every topic of a bundle we own and give the bundle up (graceful unload); returns how many.
        The bundle is disabled first: a client that reconnects meanwhile is told to retry (ServiceNotReady)
        instead of reloading the topic here, where it would stay after the bundle is gone."""
        self.ownership.disable(bundle_path)
        try:
            names = [t for t in self.loaded_topics() if await self.ownership.path_of(t.name) == bundle_path]
            for topic in names:
                await self.unload_topic(topic.name)
            if self.stream_api is not None:
                await self.stream_api.service.unload_bundle(bundle_path)
        finally:
            await self.ownership.release(bundle_path)
        return len(names)

    async def split_bundle(self, ns: NamespaceName, bundle: BundleRange, unload: bool) -> tuple[str, str]:
        """Split a bundle we own in two (we keep serving its topics), or with ``unload`` hand both halves off
        gracefully so lookups place them afresh. Returns the halves' node paths."""
        halves = await self.ownership.split(ns, bundle)
        if unload:
            for half in halves:
                await self.unload_bundle(half)
        return halves

    async def unload_topic(self, name: TopicName) -> None:
        topic = (self.topics if name.persistent else self.non_persistent).pop(str(name), None)
        if topic is not None:
            await topic.close(notify=True)

    async def _maintain(self) -> None:
        """Every ``maintenance_interval_s``: retention by time and rollover of idle ledgers need a clock, not an add;
        non-persistent topics idle that long are forgotten."""
        while True:
            await asyncio.sleep(self.config.maintenance_interval_s)  # a period, not synchronisation
            now = time.monotonic()
            for np_topic in list(self.non_persistent.values()):
                np_topic.retire_if_idle(now, self.config.maintenance_interval_s)
            for topic in list(self.topics.values()):
                try:
                    await topic.ml.trim()
                except StorageError as exc:
                    log.warning("maintenance of %s: %s", topic.name, exc)

    async def _every(self, interval_s: float, what: str, check) -> None:
        """Run ``check(topic)`` on every loaded topic every ``interval_s``; a failure on one topic is logged."""
        while True:
            await asyncio.sleep(interval_s)  # a period, not synchronisation
            for topic in list(self.topics.values()):
                if topic.closed:
                    continue
                try:
                    await check(topic)
                except (BrokerError, StorageError) as exc:
                    log.warning("%s check of %s: %s", what, topic.name, exc)

    async def _expire_subscriptions(self, topic: PersistentTopic) -> None:
        minutes = topic.limit("subscription_expiration_time_minutes")
        now = time.monotonic()
        for sub in list(topic.subscriptions.values()):
            if sub.durable and subscription_expired(minutes, idle_s=now - sub.idle_since, has_consumers=bool(sub.consumers)):
                log.info("subscription %s of %s expired (no consumer for %g min)", sub.name, topic.name, minutes)
                await topic.remove_subscription(sub.name, delete=True)

    async def _delete_if_inactive(self, topic: PersistentTopic) -> None:
        policy = topic.limit("inactive_topic_policies")
        if policy is None and self.config.broker_delete_inactive_topics_enabled:
            policy = {"deleteWhileInactive": True,
                      "maxInactiveDurationSeconds": self.config.broker_delete_inactive_topics_max_inactive_duration_s,
                      "inactiveTopicDeleteMode": self.config.broker_delete_inactive_topics_mode}
        if topic.name.partition_index >= 0:
            return  # a partition goes with its partitioned topic, never alone
        subs = list(topic.subscriptions.values())
        if inactive_topic_deletable(policy, idle_s=time.monotonic() - topic.last_active,
                                    has_producers=bool(topic.producers), has_consumers=any(s.consumers for s in subs),
                                    subscriptions=len(subs), backlog=sum(s.backlog for s in subs)):
            log.info("deleting inactive topic %s", topic.name)
            await self.delete_topic(topic.name, force=True)

    # ---- shutdown ------------------------------------------------------------

    async def close(self) -> None:
        """Graceful shutdown: stop accepting, close every topic (in-flight writes finish; clients are told to
        look the topic up again), hand the bundles off at once, then drop the connections."""
        for server in self._servers:
            server.close()
        self.authorization.close()
        self.policy_watch.close()
        if self.ownership is not None:
            for path in list(self.ownership.owned):
                self.ownership.disable(path)  # clients told to move must not reload their topics here
        if self.stream_api is not None:
            await self.stream_api.close()
        for topic in self.loaded_topics():
            self.topics.pop(str(topic.name), None)
            self.non_persistent.pop(str(topic.name), None)
            try:
                await topic.close(notify=True)
            except (BrokerError, StorageError) as exc:
                log.warning("closing %s: %s", topic.name, exc)
        if self.ownership is not None:
            await self.ownership.close()  # hands the bundles off now, not after a session timeout
        if self.load_manager is not None:
            await self.load_manager.election.resign()
        for conn in list(self.connections):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        await self.factory.close()
        await self.client.close()
        if self._owns_store:
            with metadata_errors("closing the metadata store"):
                await self.store.close()
        for server in self._servers:
            await server.wait_closed()


async def _password_secrets(config: BrokerConfig, store: MetadataStore) -> tuple[bytes, tuple[bytes, ...]]:
    """The secret new ledgers' passwords derive from (configured, or the cluster's generated one), and the
    earlier secrets whose ledgers must still open (configured ones, and the generated one once replaced)."""
    previous = tuple(parse_secret(s) for s in config.managed_ledger_password_previous_secrets)
    if config.managed_ledger_password_secret is None:
        return await cluster_secret(store), previous
    generated = await stored_secret(store)
    return parse_secret(config.managed_ledger_password_secret), previous + ((generated,) if generated else ())


def topic_ledger_config(config: BrokerConfig, policies: NamespacePolicies, topic_policies: NamespacePolicies | None):
    """A topic's managed-ledger settings: retention and persistence (E/Qw/Qa of the ledgers it creates, and the
    mark-delete rate of its subscriptions) from its own policies, else its namespace's, else the broker's."""
    def pick(name):
        value = getattr(topic_policies, name, None)
        return getattr(policies, name, None) if value is None else value

    ml_config = config.managed_ledger_config(*_retention(pick("retention_time_minutes"), pick("retention_size_mb")))
    persistence = pick("persistence")
    if persistence:
        ml_config = dataclasses.replace(ml_config, ensemble_size=persistence["bookkeeperEnsemble"],
                                        write_quorum_size=persistence["bookkeeperWriteQuorum"],
                                        ack_quorum_size=persistence["bookkeeperAckQuorum"],
                                        mark_delete_rate_per_s=persistence["managedLedgerMaxMarkDeleteRate"]).validate()
    return ml_config


def _retention(minutes: int | None, size_mb: int | None) -> tuple[int | None, int | None]:
    """Retention (minutes, MB) as the managed ledger's (seconds, MB); None = broker default."""
    seconds = None
    if minutes is not None:
        seconds = -1 if minutes < 0 else minutes * 60
    return seconds, size_mb
