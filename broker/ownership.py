"""Namespace bundles and which broker owns them (Pulsar's NamespaceService / OwnershipCache).

How it works: a namespace's topic-hash space (CRC32 of the full topic name,
0..2^32) is split into ``bundles`` equal ranges. A broker owns a bundle by
creating the *ephemeral* node ``/namespace/<tenant>/<ns>/<0xLO_0xHI>`` holding
its URLs; exactly one create can succeed, so two brokers racing for a bundle
end with one owner. The node lives as long as the broker's metadata session:
when the broker dies or is partitioned past the session timeout the node
disappears and another broker may take the bundle. A broker that loses its
session stops serving every topic at once (the service unloads them); the new
owner's managed-ledger open fences the old owner's ledgers, so nothing the old
owner writes afterwards is ever read.

Brokers also register ephemerally under ``/loadbalance/brokers/<id>`` with
their URLs and load (topics served); an unowned bundle goes to the least
loaded live broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from dataclasses import dataclass

from broker.errors import BrokerMetadataError
from broker.topics.names import TopicName
from storage.errors import MetadataError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore, SessionState

log = logging.getLogger(__name__)

HASH_SPACE = 1 << 32
NAMESPACE_ROOT = "/namespace"
BROKERS_ROOT = "/loadbalance/brokers"


def bundle_ranges(count: int) -> list[tuple[int, int]]:
    """``count`` equal ranges [lo, hi) covering the hash space."""
    step = HASH_SPACE // count
    bounds = [i * step for i in range(count)] + [HASH_SPACE]
    return [(bounds[i], bounds[i + 1]) for i in range(count)]


def topic_hash(topic: TopicName) -> int:
    return zlib.crc32(str(topic).encode()) & 0xFFFFFFFF


def bundle_of(topic: TopicName, count: int) -> tuple[int, int]:
    h = topic_hash(topic)
    for lo, hi in bundle_ranges(count):
        if lo <= h < hi:
            return lo, hi
    raise AssertionError("the ranges cover the hash space")


def bundle_path(topic: TopicName, count: int) -> str:
    lo, hi = bundle_of(topic, count)
    # Pulsar writes the upper bound of the last bundle as 0xffffffff.
    return f"{NAMESPACE_ROOT}/{topic.tenant}/{topic.namespace}/0x{lo:08x}_0x{min(hi, HASH_SPACE - 1):08x}"


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: str
    service_url: str
    web_service_url: str

    def to_json(self) -> dict:
        return {"brokerId": self.broker_id, "nativeUrl": self.service_url, "httpUrl": self.web_service_url}

    @classmethod
    def from_json(cls, doc: dict) -> "BrokerInfo":
        return cls(doc["brokerId"], doc["nativeUrl"], doc["httpUrl"])


class Ownership:
    def __init__(self, store: MetadataStore, me: BrokerInfo, bundles_per_namespace: int, on_session_lost):
        self.store = store
        self.me = me
        self.bundles = bundles_per_namespace
        self.owned: set[str] = set()
        # False while the metadata connection is suspended and until ownership is re-verified: no writes then.
        self.writable = True
        self._on_session_lost = on_session_lost
        self._verifying: asyncio.Task | None = None
        store.add_session_listener(self._session_changed)

    # ---- registration and load -------------------------------------------------------

    async def register(self, load: dict) -> None:
        path = f"{BROKERS_ROOT}/{self.me.broker_id}"
        data = json.dumps({**self.me.to_json(), **load}).encode()
        try:
            await self.store.create(path, data, ephemeral=True, make_parents=True)
        except NodeExistsError:
            await self.store.set(path, data)  # our own node from this session (a re-registration)

    async def report_load(self, load: dict) -> None:
        try:
            await self.store.set(f"{BROKERS_ROOT}/{self.me.broker_id}", json.dumps({**self.me.to_json(), **load}).encode())
        except NoNodeError:
            await self.register(load)

    async def live_brokers(self) -> list[tuple[BrokerInfo, dict]]:
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
            out.append((BrokerInfo.from_json(doc), doc))
        return out

    async def least_loaded(self) -> BrokerInfo:
        brokers = await self.live_brokers()
        if not brokers:
            return self.me
        return min(brokers, key=lambda b: (b[1].get("topics", 0), b[0].broker_id))[0]

    # ---- bundles -------------------------------------------------------------------------

    def path_of(self, topic: TopicName) -> str:
        return bundle_path(topic, self.bundles)

    def owns(self, topic: TopicName) -> bool:
        return self.path_of(topic) in self.owned

    async def owner_of(self, topic: TopicName) -> BrokerInfo | None:
        try:
            data, _ = await self.store.get(self.path_of(topic))
        except NoNodeError:
            return None
        except MetadataError as exc:
            raise BrokerMetadataError(f"reading the owner of {topic}'s bundle: {exc}") from exc
        return BrokerInfo.from_json(json.loads(data))

    async def try_acquire(self, topic: TopicName) -> BrokerInfo:
        """Own the topic's bundle if nobody does; returns the owner (this broker or the one that won)."""
        path = self.path_of(topic)
        if path in self.owned:
            return self.me
        try:
            await self.store.create(path, json.dumps(self.me.to_json()).encode(), ephemeral=True, make_parents=True)
        except NodeExistsError:
            owner = await self.owner_of(topic)
            if owner is None:  # released between our create and our read: try once more
                return await self.try_acquire(topic)
            if owner.broker_id == self.me.broker_id:
                self.owned.add(path)  # our own node, e.g. from before a restart of this object
            return owner
        except MetadataError as exc:
            raise BrokerMetadataError(f"acquiring the bundle of {topic}: {exc}") from exc
        self.owned.add(path)
        log.info("broker %s now owns bundle %s", self.me.broker_id, path)
        return self.me

    async def release(self, path: str) -> None:
        if path in self.owned:
            self.owned.discard(path)
            try:
                await self.store.delete(path)
            except (NoNodeError, MetadataError):
                pass  # gone already (or the session is): either way it is not ours

    async def release_all(self) -> None:
        for path in list(self.owned):
            await self.release(path)

    def owned_bundles(self, tenant: str, namespace: str) -> list[str]:
        prefix = f"{NAMESPACE_ROOT}/{tenant}/{namespace}/"
        return sorted(p[len(prefix):] for p in self.owned if p.startswith(prefix))

    async def _reverify(self) -> None:
        """After a suspension: keep only bundles whose node is still ours, then accept writes again."""
        for path in list(self.owned):
            try:
                data, _ = await self.store.get(path)
                mine = BrokerInfo.from_json(json.loads(data)).broker_id == self.me.broker_id
            except (NoNodeError, MetadataError):
                mine = False
            if not mine:
                self.owned.discard(path)
        self.writable = True
        log.info("broker %s re-verified %d bundles after a metadata suspension", self.me.broker_id, len(self.owned))

    def _session_changed(self, state: SessionState) -> None:
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
            self.owned.clear()
            self._on_session_lost()
