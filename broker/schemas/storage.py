"""A topic's schema history in the metadata store, one node per version.

Layout: ``/schemas/<tenant>/<namespace>/<topic>/<version, 10 digits>``, the
topic being the partitioned topic's base name, so every partition shares its
parent's history. Each node holds one version as JSON: type, definition
(base64: PROTOBUF_NATIVE and KEY_VALUE definitions are binary), properties,
timestamp, or ``{"deleted": true}`` for a deletion marker.

Why the metadata store and not a ledger (Pulsar keeps the definitions in
BookKeeper ledgers and a locator in ZooKeeper): a definition is small and
bounded (``MAX_DEFINITION_BYTES``, ``MAX_VERSIONS``), every broker that owns
one of a topic's partitions must read the history without owning a ledger,
and a version is assigned by a conditional ``create`` of its node — a
concurrent registration of the same version fails with NodeExists and the
loser reads the history again — so there is no second step (ledger written,
locator not yet) that a crash could leave half-done. The store's writes are
as durable as the managed-ledger metadata the topic itself depends on
(ZooKeeper's quorum, or the embedded store's fsync'd log).
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict

from broker.errors import BrokerError, NotAllowedError, metadata_errors
from broker.schemas import MAX_VERSIONS, SchemaInfo, StoredSchema
from magnetar.topic_name import TopicName, encode_local_name
from storage.errors import NodeExistsError, NoNodeError
from storage.metadata import MetadataStore

SCHEMAS_ROOT = "/schemas"


class VersionTakenError(BrokerError):
    """Another broker registered this version first (the caller reads the history again)."""


def schema_path(topic: TopicName) -> str:
    base = topic.partitioned_name
    return f"{SCHEMAS_ROOT}/{base.namespace_name}/{encode_local_name(base.local_name)}"


def encode(entry: StoredSchema) -> bytes:
    if entry.info is None:
        doc = {"deleted": True, "timestamp": entry.timestamp_ms}
    else:
        doc = {"type": entry.info.type, "data": base64.b64encode(entry.info.data).decode(),
               "properties": entry.info.properties, "name": entry.info.name, "timestamp": entry.timestamp_ms}
    return json.dumps(doc, sort_keys=True).encode()


def decode(version: int, data: bytes) -> StoredSchema:
    doc = json.loads(data)
    if doc.get("deleted"):
        return StoredSchema(version, None, int(doc.get("timestamp", 0)))
    info = SchemaInfo(doc["type"], base64.b64decode(doc["data"]), dict(doc.get("properties") or {}), doc.get("name", ""))
    return StoredSchema(version, info, int(doc.get("timestamp", 0)))


class SchemaStorage:
    """Reads and appends of schema histories. A version node is written once and never changed (only deleted), so
    decoded versions are cached by path: reading a history costs one listing plus the versions not seen yet."""

    CACHE_ENTRIES = 10_000

    def __init__(self, store: MetadataStore):
        self.store = store
        self._versions: OrderedDict[str, StoredSchema] = OrderedDict()

    async def history(self, topic: TopicName) -> list[StoredSchema]:
        """Every stored version of the topic's schema (deletion markers included), oldest first."""
        path = schema_path(topic)
        with metadata_errors(f"reading the schema history of {topic}"):
            try:
                names = await self.store.children(path)
            except NoNodeError:
                return []
            out = []
            for name in sorted(n for n in names if n.isdigit()):
                node = f"{path}/{name}"
                entry = self._versions.get(node)
                if entry is None:
                    try:
                        data, _ = await self.store.get(node)
                    except NoNodeError:
                        continue  # deleted by a concurrent force delete
                    entry = self._remember(node, decode(int(name), data))
                out.append(entry)
        return out

    def _remember(self, node: str, entry: StoredSchema) -> StoredSchema:
        self._versions[node] = entry
        if len(self._versions) > self.CACHE_ENTRIES:
            self._versions.popitem(last=False)
        return entry

    async def append(self, topic: TopicName, entry: StoredSchema) -> None:
        """Store ``entry`` as its version; VersionTakenError if that version exists already."""
        if entry.version >= MAX_VERSIONS:
            raise NotAllowedError(f"{topic} has {MAX_VERSIONS} schema versions, the most one topic may have; "
                              f"delete its schema (force) to start again")
        with metadata_errors(f"storing schema version {entry.version} of {topic}"):
            try:
                await self.store.create(f"{schema_path(topic)}/{entry.version:010d}", encode(entry), make_parents=True)
            except NodeExistsError as exc:
                raise VersionTakenError(f"schema version {entry.version} of {topic} was registered concurrently") from exc

    async def delete_before(self, topic: TopicName, version: int) -> None:
        """Erase the versions older than ``version`` (a forced delete, after its marker is stored: numbers are
        never reused, which is what makes the cache above safe on every broker)."""
        path = schema_path(topic)
        with metadata_errors(f"deleting the schema history of {topic}"):
            for name in await self.store.children(path):
                if name.isdigit() and int(name) < version:
                    try:
                        await self.store.delete(f"{path}/{name}")
                    except NoNodeError:
                        pass
                    self._versions.pop(f"{path}/{name}", None)
