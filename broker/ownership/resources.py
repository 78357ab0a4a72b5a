"""Tenants, namespace policies and partitioned-topic metadata, kept in the metadata store.

Layout (Pulsar's): ``/admin/policies/<tenant>`` holds the tenant's info,
``/admin/policies/<tenant>/<namespace>`` its namespace policies,
``/admin/local-policies/<tenant>/<namespace>`` its bundle boundaries (written
by the first split; until then the namespace has the default equal bundles), and
``/admin/partitioned-topics/<tenant>/<namespace>/persistent/<topic>`` the
partition count of a partitioned topic. Documents are JSON in Pulsar's field
names so admin tools recognise them. Every update is a conditional write on
the node's version (a conflict is raised, never swallowed); brokers re-read
on use, which keeps several brokers consistent, except authorization, which
caches tenants' admin roles and namespaces' ``auth_policies`` and watches
their nodes (broker/security/authorization.py).

Permissions live where Pulsar keeps them, in the namespace's policies:
``auth_policies = {"namespace_auth": {role: [actions]}, "destination_auth":
{topic: {role: [actions]}}, "subscription_auth_roles": {sub: [roles]}}``;
actions are Pulsar's AuthAction names (``AUTH_ACTIONS``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Callable

from broker.errors import BrokerError, NotAllowedError, TopicNotFoundError, metadata_errors
from broker.ownership.bundles import NamespaceBundles
from broker.topics.names import check_segment
from broker.topics.lifecycle_policies import (
    PolicyDocumentError, check_inactive_topic_policies, check_minutes, check_persistence, check_quota_map, check_ttl,
)
from broker.topics.rate_limits import DISPATCH_RATE_FIELDS, PUBLISH_RATE_FIELDS, check_rate_map
from magnetar.topic_name import NamespaceName, TopicName, encode_local_name
from storage.errors import BadVersionError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore

POLICIES_ROOT = "/admin/policies"
LOCAL_POLICIES_ROOT = "/admin/local-policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"  # ours: Pulsar keeps them in a system topic, see docs/broker.md
MANAGED_LEDGERS_ROOT = "/managed-ledgers"

# Pulsar's AuthAction values. Only produce and consume are checked here; the others are stored, as Pulsar's
# functions/sources/sinks/packages workers would read them.
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
MAX_ROLE_CHARS = 256
MAX_ROLES = 1000  # per tenant's adminRoles, per namespace's grants, per topic's grants
MAX_TOPIC_GRANTS = 1000  # topics with grants of their own in one namespace
_UPDATE_ATTEMPTS = 5  # conditional read-modify-write retries before a conflict is reported


class ConflictError(NotAllowedError):
    """The resource already exists."""

    http_status = 409  # REST's own status for a conflict; on the wire it is NotAllowedError


class NotFoundError(TopicNotFoundError):
    """The resource does not exist."""


class InvalidPoliciesError(BrokerError):
    """A permission, role or policy document is malformed (an unknown action, a role that is not a string)."""

    http_status = 400


def check_role(role) -> str:
    if not isinstance(role, str) or not role or len(role) > MAX_ROLE_CHARS or not role.isprintable():
        raise InvalidPoliciesError(f"a role must be a non-empty printable string of at most {MAX_ROLE_CHARS} "
                                   f"characters, got {role!r}")
    return role


def parse_actions(actions) -> list[str]:
    """The actions of a grant, sorted and without repeats; InvalidPoliciesError for anything but a JSON array of
    Pulsar's action names."""
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InvalidPoliciesError(f"actions must be a JSON array of strings from {list(AUTH_ACTIONS)}, got {actions!r}")
    unknown = sorted(set(actions) - set(AUTH_ACTIONS))
    if unknown:
        raise InvalidPoliciesError(f"unknown action(s) {unknown}; actions are {list(AUTH_ACTIONS)}")
    return sorted(set(actions))


def _role_grants(doc, what: str) -> dict[str, list[str]]:
    if not isinstance(doc, dict):
        raise InvalidPoliciesError(f"{what} must be a JSON object {{role: [actions]}}, got {doc!r}")
    if len(doc) > MAX_ROLES:
        raise InvalidPoliciesError(f"{what} has {len(doc)} roles; at most {MAX_ROLES}")
    return {check_role(role): parse_actions(actions) for role, actions in doc.items()}


def normalize_auth_policies(doc) -> dict:
    """Pulsar's ``auth_policies`` document, checked and in canonical form (all three keys present)."""
    if not isinstance(doc, dict):
        raise InvalidPoliciesError(f"auth_policies must be a JSON object, got {doc!r}")
    unknown = sorted(set(doc) - {"namespace_auth", "destination_auth", "subscription_auth_roles"})
    if unknown:
        raise InvalidPoliciesError(f"unknown auth_policies field(s) {unknown}")
    topics = doc.get("destination_auth") or {}
    if not isinstance(topics, dict) or len(topics) > MAX_TOPIC_GRANTS:
        raise InvalidPoliciesError(f"destination_auth must be a JSON object {{topic: {{role: [actions]}}}} of at most "
                                   f"{MAX_TOPIC_GRANTS} topics")
    subs = doc.get("subscription_auth_roles") or {}
    if not isinstance(subs, dict) or len(subs) > MAX_TOPIC_GRANTS or not all(
            isinstance(roles, list) and len(roles) <= MAX_ROLES for roles in subs.values()):
        raise InvalidPoliciesError("subscription_auth_roles must be a JSON object {subscription: [roles]}")
    return {
        "namespace_auth": _role_grants(doc.get("namespace_auth") or {}, "namespace_auth"),
        "destination_auth": {str(topic): _role_grants(grants, f"destination_auth[{topic!r}]")
                             for topic, grants in topics.items()},
        "subscription_auth_roles": {str(sub): sorted({check_role(r) for r in roles}) for sub, roles in subs.items()},
    }


def empty_auth_policies() -> dict:
    return {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}


_PULSAR_JSON_NAMES = {  # policies stored under Pulsar's own JSON names
    "publish_max_message_rate": "publishMaxMessageRate",
    "topic_dispatch_rate": "topicDispatchRate",
    "subscription_dispatch_rate": "subscriptionDispatchRate",
}


@dataclass(frozen=True)
class NamespacePolicies:
    """A namespace's policies; -1/None means "use the broker's default"."""

    retention_time_minutes: int | None = None
    retention_size_mb: int | None = None
    deduplication_enabled: bool | None = None
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_consumers_per_subscription: int | None = None
    max_unacked_messages_per_consumer: int | None = None
    max_unacked_messages_per_subscription: int | None = None
    compaction_threshold: int | None = None  # bytes after the compaction horizon that start a run; 0 = off
    auth_policies: dict | None = None  # Pulsar's shape, see normalize_auth_policies; None = no grants
    # Schema policies (broker/schemas): a strategy name, None = the broker's default.
    schema_compatibility_strategy: str | None = None
    is_allow_auto_update_schema: bool | None = None
    schema_validation_enforced: bool | None = None
    # Rates per cluster name, {cluster: PublishRate or DispatchRate document} as Pulsar stores them
    # (broker/http/rate_policies.py checks them, broker/topics/throttling.py applies them).
    publish_max_message_rate: dict | None = None
    topic_dispatch_rate: dict | None = None
    subscription_dispatch_rate: dict | None = None
    # Message lifecycle (broker/topics/lifecycle_policies.py checks the documents; names are Pulsar's).
    message_ttl_in_seconds: int | None = None
    backlog_quota_map: dict | None = None
    persistence: dict | None = None
    inactive_topic_policies: dict | None = None
    subscription_expiration_time_minutes: int | None = None

    def to_json(self) -> dict:
        out = {k: v for k, v in asdict(self).items()
               if v is not None and not k.startswith("retention") and k not in _PULSAR_JSON_NAMES}
        for attr, name in _PULSAR_JSON_NAMES.items():
            if getattr(self, attr):
                out[name] = getattr(self, attr)
        if self.topic_dispatch_rate:  # Pulsar writes both (clusterDispatchRate is the older name)
            out["clusterDispatchRate"] = self.topic_dispatch_rate
        if self.retention_time_minutes is not None or self.retention_size_mb is not None:
            out["retention_policies"] = {
                "retentionTimeInMinutes": self.retention_time_minutes or 0,
                "retentionSizeInMB": self.retention_size_mb or 0,
            }
        return out

    @classmethod
    def from_json(cls, doc: dict) -> "NamespacePolicies":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in known and k not in _PULSAR_JSON_NAMES}
        if doc.get("topicDispatchRate") is None and doc.get("clusterDispatchRate") is not None:
            doc = {**doc, "topicDispatchRate": doc["clusterDispatchRate"]}
        for attr, name in _PULSAR_JSON_NAMES.items():
            if doc.get(name) is not None:
                shape = PUBLISH_RATE_FIELDS if attr == "publish_max_message_rate" else DISPATCH_RATE_FIELDS
                try:
                    values[attr] = check_rate_map(doc[name], shape, name)
                except ValueError as exc:
                    raise InvalidPoliciesError(str(exc)) from exc
        if values.get("auth_policies") is not None:
            values["auth_policies"] = normalize_auth_policies(values["auth_policies"])
        for name, check in _LIFECYCLE_CHECKS.items():
            if values.get(name) is not None:
                try:
                    values[name] = check(values[name])
                except PolicyDocumentError as exc:
                    raise InvalidPoliciesError(str(exc)) from exc
        retention = doc.get("retention_policies")
        if retention:
            values["retention_time_minutes"] = int(retention.get("retentionTimeInMinutes", 0))
            values["retention_size_mb"] = int(retention.get("retentionSizeInMB", 0))
        return cls(**values)


_LIFECYCLE_CHECKS = {
    "message_ttl_in_seconds": check_ttl,
    "backlog_quota_map": check_quota_map,
    "persistence": check_persistence,
    "inactive_topic_policies": check_inactive_topic_policies,
    "subscription_expiration_time_minutes": lambda v: check_minutes(v, "subscriptionExpirationTimeMinutes"),
}


@dataclass(frozen=True)
class TenantInfo:
    admin_roles: list[str] = field(default_factory=list)
    allowed_clusters: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"adminRoles": list(self.admin_roles), "allowedClusters": list(self.allowed_clusters)}

    @classmethod
    def from_json(cls, doc: dict) -> "TenantInfo":
        if not isinstance(doc, dict):
            raise InvalidPoliciesError(f"tenant info must be a JSON object, got {doc!r}")
        admins, clusters = doc.get("adminRoles") or [], doc.get("allowedClusters") or []
        if not isinstance(admins, list) or len(admins) > MAX_ROLES:
            raise InvalidPoliciesError(f"adminRoles must be a JSON array of at most {MAX_ROLES} roles, got {admins!r}")
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise InvalidPoliciesError(f"allowedClusters must be a JSON array of cluster names, got {clusters!r}")
        return cls([check_role(r) for r in admins], list(clusters))


def _dump(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


class Resources:
    """Reads and conditional writes of tenants, namespaces and partitioned topics."""

    def __init__(self, store: MetadataStore):
        self.store = store

    # ---- tenants --------------------------------------------------------

    async def tenants(self) -> list[str]:
        return sorted(await self._children(POLICIES_ROOT))

    async def create_tenant(self, tenant: str, info: TenantInfo) -> None:
        check_segment("tenant", tenant)
        await self._create(f"{POLICIES_ROOT}/{tenant}", info.to_json(), f"tenant {tenant} already exists")

    async def get_tenant(self, tenant: str) -> TenantInfo:
        return TenantInfo.from_json(await self._get(f"{POLICIES_ROOT}/{tenant}", f"tenant {tenant} does not exist"))

    async def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        """Replace a tenant's info (its admin roles, allowed clusters); NotFoundError if it does not exist."""
        with metadata_errors(f"updating tenant {tenant}"):
            try:
                await self.store.set(f"{POLICIES_ROOT}/{tenant}", _dump(info.to_json()))
            except NoNodeError as exc:
                raise NotFoundError(f"tenant {tenant} does not exist") from exc

    async def delete_tenant(self, tenant: str) -> None:
        if await self.namespaces(tenant):
            raise NotAllowedError(f"tenant {tenant} still has namespaces")
        await self._delete(f"{POLICIES_ROOT}/{tenant}", f"tenant {tenant} does not exist")

    # ---- namespaces -----------------------------------------------------

    async def namespaces(self, tenant: str) -> list[str]:
        await self.get_tenant(tenant)
        return sorted(f"{tenant}/{ns}" for ns in await self._children(f"{POLICIES_ROOT}/{tenant}"))

    async def create_namespace(self, ns: NamespaceName, policies: NamespacePolicies | None = None,
                               bundles: NamespaceBundles | None = None) -> None:
        """Create the namespace; ``bundles`` (else the broker's default count) are stored first, so no lookup can
        see the namespace with other bundles than those."""
        await self.get_tenant(ns.tenant)
        if await self.namespace_exists(ns):
            raise ConflictError(f"namespace {ns} already exists")
        with metadata_errors(f"clearing the bundles of {ns}"):
            try:
                await self.store.delete(self._local_path(ns))  # left by a namespace whose deletion stopped half-way
            except NoNodeError:
                pass
        if bundles is not None:
            await self.write_namespace_bundles(ns, bundles, -1)
        await self._create(self._ns_path(ns), (policies or NamespacePolicies()).to_json(), f"namespace {ns} already exists")

    async def namespace_exists(self, ns: NamespaceName) -> bool:
        return await self._exists(self._ns_path(ns))

    async def get_policies(self, ns: NamespaceName) -> NamespacePolicies:
        return NamespacePolicies.from_json(await self._get(self._ns_path(ns), f"namespace {ns} does not exist"))

    async def update_policies(self, ns: NamespaceName, **changes) -> NamespacePolicies:
        """Read-modify-write of one namespace's policies, conditional on the version read; a concurrent writer
        (another broker's admin call) makes it read and apply again, ``_UPDATE_ATTEMPTS`` times, then
        ConflictError."""
        path = self._ns_path(ns)
        for _ in range(_UPDATE_ATTEMPTS):
            with metadata_errors(f"updating policies of {ns}"):
                try:
                    data, stat = await self.store.get(path)
                    current = NamespacePolicies.from_json(json.loads(data))
                    updated = NamespacePolicies(**{**asdict(current), **changes})
                    await self.store.set(path, _dump(updated.to_json()), stat.version)
                    return updated
                except NoNodeError as exc:
                    raise NotFoundError(f"namespace {ns} does not exist") from exc
                except BadVersionError:
                    continue
        raise ConflictError(f"the policies of {ns} kept changing concurrently; retry")

    async def update_auth_policies(self, ns: NamespaceName, change: Callable[[dict], dict]) -> dict:
        """Apply ``change`` (canonical auth_policies -> new ones) to the namespace's permissions, conditionally on
        the version read; a concurrent writer makes it read and apply again (``_UPDATE_ATTEMPTS`` times, then
        ConflictError). Returns the stored permissions."""
        path = self._ns_path(ns)
        for _ in range(_UPDATE_ATTEMPTS):
            with metadata_errors(f"updating permissions of {ns}"):
                try:
                    data, stat = await self.store.get(path)
                    doc = json.loads(data)
                    current = normalize_auth_policies(doc.get("auth_policies") or empty_auth_policies())
                    doc["auth_policies"] = normalize_auth_policies(change(current))
                    await self.store.set(path, _dump(doc), stat.version)
                    return doc["auth_policies"]
                except NoNodeError as exc:
                    raise NotFoundError(f"namespace {ns} does not exist") from exc
                except BadVersionError:
                    continue
        raise ConflictError(f"the permissions of {ns} kept changing concurrently; retry")

    async def delete_namespace(self, ns: NamespaceName) -> None:
        if (await self.topics(ns) or await self.partitioned_topics(ns)
                or await self.partitioned_topics(ns, "non-persistent")):
            raise NotAllowedError(f"namespace {ns} still has topics")
        await self._delete(self._ns_path(ns), f"namespace {ns} does not exist")
        try:
            await self._delete(self._local_path(ns), "")
        except NotFoundError:
            pass  # never split

    # ---- topic policies -------------------------------------------------

    @staticmethod
    def topic_policies_path(topic: TopicName) -> str:
        """A partition shares its partitioned topic's policies, as in Pulsar; a non-persistent topic has its own
        beside the persistent topic of the same name."""
        base = topic.partitioned_name if topic.partition_index >= 0 else topic
        return f"{TOPIC_POLICIES_ROOT}/{base.namespace_name}/{base.domain}/{encode_local_name(base.local_name)}"

    async def get_topic_policies(self, topic: TopicName) -> NamespacePolicies:
        """The topic's own policies (every field None when it has none)."""
        with metadata_errors(f"reading the policies of {topic}"):
            try:
                data, _ = await self.store.get(self.topic_policies_path(topic))
            except NoNodeError:
                return NamespacePolicies()
        return NamespacePolicies.from_json(json.loads(data))

    async def update_topic_policies(self, topic: TopicName, **changes) -> NamespacePolicies:
        """Conditional read-modify-write of the topic's policies (created on first use); a concurrent writer
        makes it read again, ``_UPDATE_ATTEMPTS`` times, then ConflictError."""
        path = self.topic_policies_path(topic)
        for _ in range(_UPDATE_ATTEMPTS):
            with metadata_errors(f"updating the policies of {topic}"):
                try:
                    try:
                        data, stat = await self.store.get(path)
                    except NoNodeError:
                        updated = NamespacePolicies(**changes)
                        await self.store.create(path, _dump(updated.to_json()), make_parents=True)
                        return updated
                    updated = NamespacePolicies(**{**asdict(NamespacePolicies.from_json(json.loads(data))), **changes})
                    await self.store.set(path, _dump(updated.to_json()), stat.version)
                    return updated
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
        raise ConflictError(f"the policies of {topic} kept changing concurrently; retry")

    async def delete_topic_policies(self, topic: TopicName) -> None:
        with metadata_errors(f"deleting the policies of {topic}"):
            try:
                await self.store.delete(self.topic_policies_path(topic))
            except NoNodeError:
                pass

    # ---- bundle boundaries (local policies) ------------------------------

    async def namespace_bundles(self, ns: NamespaceName, default_count: int) -> tuple[NamespaceBundles, int]:
        """The namespace's bundles and the version of the node they were read from (-1: none stored yet, so
        ``default_count`` equal bundles)."""
        with metadata_errors(f"reading the bundles of {ns}"):
            try:
                data, stat = await self.store.get(self._local_path(ns))
            except NoNodeError:
                return NamespaceBundles.equal(default_count), -1
        doc = json.loads(data).get("bundles")
        return (NamespaceBundles.from_json(doc) if doc else NamespaceBundles.equal(default_count)), stat.version

    async def write_namespace_bundles(self, ns: NamespaceName, bundles: NamespaceBundles, version: int) -> int:
        """Store ``bundles`` if the local policies are still at ``version`` (-1: absent); the other local policies
        are kept. Returns the new version. Raises ConflictError when someone wrote in between."""
        path = self._local_path(ns)
        conflict = f"the bundles of {ns} changed concurrently"
        with metadata_errors(f"writing the bundles of {ns}"):
            try:
                if version < 0:
                    await self.store.create(path, _dump({"bundles": bundles.to_json()}), make_parents=True)
                    return 0
                data, stat = await self.store.get(path)
                if stat.version != version:
                    raise ConflictError(conflict)
                doc = {**json.loads(data), "bundles": bundles.to_json()}
                return (await self.store.set(path, _dump(doc), version)).version
            except (NodeExistsError, BadVersionError, NoNodeError) as exc:
                raise ConflictError(conflict) from exc

    # ---- topics ---------------------------------------------------------

    async def topics(self, ns: NamespaceName) -> list[TopicName]:
        """Topics with a managed ledger (non-partitioned topics and partitions)."""
        names = await self._children(f"{MANAGED_LEDGERS_ROOT}/{ns}/persistent")
        return sorted((TopicName.from_managed_ledger_name(f"{ns}/persistent/{n}") for n in names), key=str)

    async def partitioned_topics(self, ns: NamespaceName, domain: str = "persistent") -> list[TopicName]:
        """The namespace's partitioned topics of ``domain`` (persistent or non-persistent: both are on record)."""
        names = await self._children(f"{PARTITIONED_ROOT}/{ns}/{domain}")
        return sorted((TopicName.from_managed_ledger_name(f"{ns}/{domain}/{n}") for n in names), key=str)

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        if partitions < 1:
            raise NotAllowedError(f"a partitioned topic needs at least 1 partition, got {partitions}")
        if topic.partition_index >= 0:
            raise NotAllowedError(f"{topic} is a partition name; a partitioned topic may not end in -partition-<n>")
        await self._create(self._partitioned_path(topic), {"partitions": partitions}, f"topic {topic} already exists")

    async def update_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """Grow a partitioned topic (Pulsar's updatePartitionedTopic): one conditional write, never a shrink."""
        path = self._partitioned_path(topic)
        with metadata_errors(f"reading partitions of {topic}"):
            try:
                data, stat = await self.store.get(path)
            except NoNodeError as exc:
                raise NotFoundError(f"partitioned topic {topic} does not exist") from exc
        current = int(json.loads(data)["partitions"])
        if partitions <= current:
            raise NotAllowedError(f"{topic} has {current} partitions; the count can only grow, got {partitions}")
        with metadata_errors(f"updating partitions of {topic}"):
            try:
                await self.store.set(path, _dump({"partitions": partitions}), stat.version)
            except BadVersionError as exc:
                raise ConflictError(f"the partitions of {topic} changed concurrently; read them and retry") from exc

    async def partition_count(self, topic: TopicName) -> int:
        """Partitions of ``topic``; 0 when it is not a partitioned topic."""
        with metadata_errors(f"reading partitions of {topic}"):
            try:
                data, _ = await self.store.get(self._partitioned_path(topic))
            except NoNodeError:
                return 0
        return int(json.loads(data)["partitions"])

    async def delete_partitioned_topic(self, topic: TopicName) -> None:
        await self._delete(self._partitioned_path(topic), f"partitioned topic {topic} does not exist")

    # ---- helpers --------------------------------------------------------

    @staticmethod
    def _ns_path(ns: NamespaceName) -> str:
        return f"{POLICIES_ROOT}/{ns.tenant}/{ns.namespace}"

    @staticmethod
    def _local_path(ns: NamespaceName) -> str:
        return f"{LOCAL_POLICIES_ROOT}/{ns.tenant}/{ns.namespace}"

    @staticmethod
    def _partitioned_path(topic: TopicName) -> str:
        """Pulsar's layout: ``/admin/partitioned-topics/<t>/<ns>/<persistent|non-persistent>/<topic>``."""
        return f"{PARTITIONED_ROOT}/{topic.namespace_name}/{topic.domain}/{encode_local_name(topic.local_name)}"

    async def _children(self, path: str) -> list[str]:
        with metadata_errors(f"listing {path}"):
            try:
                return await self.store.children(path)
            except NoNodeError:
                return []

    async def _exists(self, path: str) -> bool:
        with metadata_errors(f"reading {path}"):
            return await self.store.exists(path) is not None

    async def _get(self, path: str, missing: str) -> dict:
        with metadata_errors(f"reading {path}"):
            try:
                data, _ = await self.store.get(path)
            except NoNodeError as exc:
                raise NotFoundError(missing) from exc
        return json.loads(data)

    async def _create(self, path: str, doc: dict, exists: str) -> None:
        with metadata_errors(f"creating {path}"):
            try:
                await self.store.create(path, _dump(doc), make_parents=True)
            except NodeExistsError as exc:
                raise ConflictError(exists) from exc

    async def _delete(self, path: str, missing: str) -> None:
        with metadata_errors(f"deleting {path}"):
            try:
                await self.store.delete(path)
            except NoNodeError as exc:
                raise NotFoundError(missing) from exc

    async def ensure_default_namespace(self, cluster: str) -> None:
        """Create tenant ``public`` and namespace ``public/default`` if missing (as Pulsar standalone does)."""
        for step in (
            lambda: self.create_tenant("public", TenantInfo([], [cluster])),
            lambda: self.create_namespace(NamespaceName("public", "default")),
        ):
            try:
                await step()
            except ConflictError:
                pass
