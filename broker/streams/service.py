"""The broker's Stream API: namespaces and streams in the metadata store, and the streams this broker serves.

A stream is served only by the broker that owns its namespace bundle, through
the same ownership (broker/ownership/) and lookup as topics
(``BrokerService.lookup``): an RPC for a stream owned elsewhere ends with
NotOwner and the owner's stream address, read from the owner's ephemeral
``/stream-api/brokers/<broker id>`` node; a client that follows the redirect
says so (``authoritative``), and the broker placement chose then takes the
bundle. A broker proven dead loses its bundles at once (takeover.py), so the
stream reopens on a live broker, fencing the dead one's ledgers.

Namespace and stream documents are created and read by any broker; loading a
stream (its managed ledger), appends, reads, truncation and deletion happen
on the owner. Loads of one stream are shared, never run twice.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.errors import BrokerError, ServiceNotReadyError, TopicNotFoundError
from broker.ownership.resources import ConflictError, NotFoundError
from broker.streams.errors import StreamApiError, invalid
from broker.streams.policies import (
    BROKERS_ROOT, ROOT, Placement, Policies, Retention, Rolling, check_stream_name, dump, load, namespace_path,
    overrides_from_pb, ownership_name, parse_namespace, stream_path,
)
from broker.streams.stream import LogStream, unavailable
from magnetar.topic_name import NamespaceName
from storage.errors import (
    MetadataError, NodeExistsError, NoNodeError, NotEnoughBookiesError, PlacementPolicyError, StorageError,
)
from storage.shared_load import SharedLoads

log = logging.getLogger(__name__)

MAX_STREAMS_PER_NAMESPACE = 100_000


class StreamService:
    def __init__(self, broker, address: str):
        self.broker = broker
        self.store = broker.store
        self.factory = broker.factory
        self.clock = time.time
        self.cache_size_mb = broker.config.managed_ledger_cache_size_mb
        self.max_entry_bytes = broker.config.max_message_size
        self.address = address  # host:port clients dial for this broker's Stream API
        self.streams: dict[tuple[NamespaceName, str], LogStream] = {}
        self._loading: SharedLoads[LogStream] = SharedLoads()
        self._maintenance: asyncio.Task | None = None

    def defaults(self) -> Policies:
        c = self.broker.config
        return Policies(
            Placement(c.managed_ledger_ensemble_size, c.managed_ledger_write_quorum, c.managed_ledger_ack_quorum,
                      min(2, c.managed_ledger_write_quorum)),
            Rolling(), Retention())

    async def register(self) -> None:
        """Publish this broker's stream address (ephemeral), so others can redirect clients here."""
        path = f"{BROKERS_ROOT}/{self.broker.ownership.me.broker_id}"
        try:
            await self.store.delete(path)  # a previous incarnation's, or our own before a session loss
        except NoNodeError:
            pass
        await self.store.create(path, self.address.encode(), ephemeral=True, make_parents=True)
        if self._maintenance is None:
            self._maintenance = self.broker.spawn(self._maintain())

    # ---- namespaces ----------------------------------------------------------------------

    async def create_namespace(self, name: str, policies: Policies) -> tuple[NamespaceName, Policies]:
        ns = parse_namespace(name)
        policies.validate()
        await self.check_placement(ns, policies.placement)
        try:
            await self.broker.resources.create_namespace(ns)
        except ConflictError:
            pass  # a Pulsar namespace already: its streams share its bundles
        except NotFoundError as exc:
            raise StreamApiError("NamespaceNotFound", f"cannot create {ns}: {exc}") from exc
        try:
            await self.store.create(namespace_path(ns), dump(policies.to_doc()), make_parents=True)
        except NodeExistsError as exc:
            raise StreamApiError("NamespaceExists", f"stream namespace {ns} already exists") from exc
        return ns, policies

    async def check_placement(self, ns: NamespaceName, p: Placement) -> None:
        """Refuse a namespace whose placement the bookies cannot meet now. Too few bookies in all is not
        refused: one may be restarting, and a ledger's creation waits for them (StreamUnavailable meanwhile)."""
        try:
            await self.factory.client.check_placement(p.ensemble_size, p.write_quorum, p.ack_quorum, p.min_zones)
        except PlacementPolicyError as exc:
            raise StreamApiError("PlacementUnsatisfiable", f"stream namespace {ns}: E{p.ensemble_size}/"
                                 f"Qw{p.write_quorum}/Qa{p.ack_quorum} with min_zones={p.min_zones}: {exc}") from exc
        except NotEnoughBookiesError:
            pass

    async def namespace_policies(self, ns: NamespaceName) -> Policies:
        try:
            data, _ = await self.store.get(namespace_path(ns))
        except NoNodeError as exc:
            raise StreamApiError("NamespaceNotFound", f"stream namespace {ns} does not exist") from exc
        return Policies.from_doc(load(data))

    async def list_namespaces(self, tenant: str) -> list[str]:
        tenant = parse_namespace(f"{tenant}/x").tenant
        return sorted(f"{tenant}/{n}" for n in await self._children(f"{ROOT}/{tenant}"))

    async def delete_namespace(self, name: str) -> tuple[NamespaceName, Policies]:
        ns = parse_namespace(name)
        policies = await self.namespace_policies(ns)
        if await self._children(namespace_path(ns)):
            raise StreamApiError("NamespaceNotEmpty", f"stream namespace {ns} still has streams")
        try:
            await self.store.delete(namespace_path(ns))
        except NoNodeError:
            pass
        return ns, policies

    # ---- streams -----------------------------------------------------------------------------

    async def create_stream(self, name: str, stream: str, rolling, retention) -> tuple[NamespaceName, str]:
        ns, stream = parse_namespace(name), check_stream_name(stream)
        overrides = overrides_from_pb(rolling, retention)
        (await self.namespace_policies(ns)).with_overrides(overrides)  # validates the overrides
        if len(await self._children(namespace_path(ns))) >= MAX_STREAMS_PER_NAMESPACE:
            raise invalid(f"stream namespace {ns} already has {MAX_STREAMS_PER_NAMESPACE} streams")
        doc = {"overrides": overrides, "writer_epoch": 0, "next_sequence_floor": 0, "truncated_before": None,
               "created_s": self.clock()}
        try:
            await self.store.create(stream_path(ns, stream), dump(doc))
        except NodeExistsError as exc:
            raise StreamApiError("StreamExists", f"stream {ns}/{stream} already exists") from exc
        return ns, stream

    async def stream_policies(self, ns: NamespaceName, stream: str) -> Policies:
        """A stream's effective policies, read from the metadata store (no need to own it)."""
        try:
            data, _ = await self.store.get(stream_path(ns, stream))
        except NoNodeError as exc:
            raise StreamApiError("StreamNotFound", f"stream {ns}/{stream} does not exist") from exc
        return (await self.namespace_policies(ns)).with_overrides(load(data).get("overrides", {}))

    async def list_streams(self, name: str) -> list[str]:
        ns = parse_namespace(name)
        await self.namespace_policies(ns)
        return sorted(await self._children(namespace_path(ns)))

    async def stream(self, name: str, stream: str, *, authoritative: bool = False) -> LogStream:
        """The stream, loaded here; NotOwner (with the owner's address) when another broker serves it."""
        ns, stream = parse_namespace(name), check_stream_name(stream)
        key = (ns, stream)
        loaded = self.streams.get(key)
        ownership = self.broker.ownership
        if loaded is not None and not loaded.closed and await ownership.owns(ownership_name(ns, stream)):
            return loaded
        ns_policies = await self.namespace_policies(ns)
        await self._check_owner(ns, stream, authoritative)

        async def start() -> LogStream:
            opened = await LogStream.load(self, ns, stream, ns_policies)
            if not await ownership.owns(ownership_name(ns, stream)):  # lost while loading
                await opened.close()
                raise StreamApiError("StreamUnavailable", f"stream {ns}/{stream} moved while loading; look it up again")
            self.streams[key] = opened
            return opened

        return await self._loading.load(key, start)

    async def _check_owner(self, ns: NamespaceName, stream: str, authoritative: bool) -> None:
        try:
            owner, _ = await self.broker.lookup(ownership_name(ns, stream), authoritative)
        except TopicNotFoundError as exc:
            raise StreamApiError("NamespaceNotFound", str(exc)) from exc
        except ServiceNotReadyError as exc:
            raise StreamApiError("StreamUnavailable", str(exc)) from exc
        except (BrokerError, MetadataError) as exc:
            if isinstance(exc, StreamApiError):
                raise
            raise unavailable(f"looking up the owner of {ns}/{stream}", exc) from exc
        if owner.broker_id == self.broker.ownership.me.broker_id:
            return
        try:
            data, _ = await self.store.get(f"{BROKERS_ROOT}/{owner.broker_id}")
        except NoNodeError as exc:
            raise StreamApiError("StreamUnavailable", f"broker {owner.broker_id} owns {ns}/{stream} but serves no "
                                 "Stream API") from exc
        raise StreamApiError("NotOwner", f"{ns}/{stream} is served by broker {owner.broker_id}", redirect=data.decode())

    async def delete_stream(self, name: str, stream: str, *, authoritative: bool = False) -> None:
        loaded = await self.stream(name, stream, authoritative=authoritative)
        self.streams.pop((loaded.ns, loaded.name), None)
        await loaded.delete()

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NoNodeError:
            return []

    # ---- ownership changes and lifecycle ----------------------------------------------------

    async def unload_bundle(self, path: str) -> None:
        """A bundle left this broker (lost, unloaded, or the session expired): stop serving its streams."""
        for key, stream in list(self.streams.items()):
            if path is None or await self.broker.ownership.path_of(ownership_name(*key)) == path:
                self.streams.pop(key, None)
                await stream.close()

    async def _maintain(self) -> None:
        """Retention by time and size, and rolling by age, need a clock rather than an append."""
        while True:
            await asyncio.sleep(self.broker.config.maintenance_interval_s)  # a period, not synchronisation
            for stream in list(self.streams.values()):
                try:
                    await stream.trim()
                except StorageError as exc:
                    log.warning("maintenance of stream %s/%s: %s", stream.ns, stream.name, exc)

    async def close(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
        for key in list(self.streams):
            await self.streams.pop(key).close()
