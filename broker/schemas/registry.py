"""The registry service: what producers, consumers, GET_SCHEMA and the admin REST ask of a topic's schema history.

How it works. A topic's *live* history is its versions after the last
deletion marker. Registering a schema (a producer's, GET_OR_CREATE_SCHEMA's,
an admin POST) first looks for the same schema among the live versions and
answers that version; otherwise the namespace's policies decide: with
``is_allow_auto_update_schema`` off only a topic without a schema may get one
from a client, and the compatibility strategy (``schema_compatibility_strategy``,
else the broker's default, BACKWARD) must accept it. The new version is the
highest stored plus one, claimed by a conditional create; a broker that
loses the race reads the history again and decides afresh. A consumer's schema
is checked, never stored, unless the topic is idle (no schema, no
producers, no data), when it is registered as Pulsar does.

``decide`` holds the rule for a new schema as a pure function of the live
history, the schema and the policies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from broker.errors import IncompatibleSchemaError, NotAllowedError
from broker.schemas import AVRO_BASED, SchemaInfo, StoredSchema
from broker.schemas.compatibility import Strategy, check_compatible, parse_avro, parse_strategy
from broker.schemas.storage import SchemaStorage, VersionTakenError
from magnetar.topic_name import TopicName

_REGISTER_ATTEMPTS = 5  # concurrent registrations of one topic before the caller is told to retry


@dataclass(frozen=True)
class SchemaPolicies:
    strategy: Strategy
    allow_auto_update: bool
    validation_enforced: bool


def schema_policies(ns, config) -> SchemaPolicies:
    """A namespace's schema policies (NamespacePolicies), each unset one taken from the broker's config."""
    strategy = parse_strategy(ns.schema_compatibility_strategy) if ns.schema_compatibility_strategy else None
    return SchemaPolicies(
        strategy or parse_strategy(config.schema_compatibility_strategy),
        config.is_allow_auto_update_schema if ns.is_allow_auto_update_schema is None else ns.is_allow_auto_update_schema,
        config.schema_validation_enforced if ns.schema_validation_enforced is None else ns.schema_validation_enforced,
    )


def live(history: list[StoredSchema]) -> list[StoredSchema]:
    """The versions after the last deletion marker."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].deleted:
            return history[i + 1:]
    return history


def decide(live_history: list[StoredSchema], new: SchemaInfo, policies: SchemaPolicies, *,
           from_client: bool) -> int | None:
    """The version ``new`` already has (the newest live version equal to it), or None when it is to be stored as a
    new version. Raises IncompatibleSchemaError when the policies refuse it; an admin (``from_client`` False) is not
    bound by ``is_allow_auto_update_schema``."""
    for entry in reversed(live_history):
        if entry.info.same_as(new):
            return entry.version
    if live_history and from_client and not policies.allow_auto_update:
        raise IncompatibleSchemaError("the topic's schema may not be updated by clients (is_allow_auto_update_schema "
                                      "is false) and this schema is not one of its versions")
    check_compatible(policies.strategy, [e.info for e in live_history], new)
    return None


def check_reader(live_history: list[StoredSchema], reader: SchemaInfo, strategy: Strategy) -> None:
    """A consumer's schema must read what the topic holds: the latest version, or every live version under a
    *_TRANSITIVE strategy (an exact match of a version is always accepted; ALWAYS_COMPATIBLE accepts anything)."""
    if not live_history or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if any(e.info.same_as(reader) for e in live_history):
        return
    check_compatible(Strategy.BACKWARD_TRANSITIVE if strategy.transitive else Strategy.BACKWARD,
                     [e.info for e in live_history], reader)


class SchemaRegistry:
    def __init__(self, service, clock_ms: Callable[[], int] | None = None):
        self.service = service
        self.storage = SchemaStorage(service.store)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    async def policies(self, topic: TopicName, namespace_policies=None) -> SchemaPolicies:
        """The topic's schema policies: from ``namespace_policies`` when given (a loaded topic's, kept fresh by the
        policy watch), else read from the metadata store."""
        ns = namespace_policies or await self.service.resources.get_policies(topic.namespace_name)
        return schema_policies(ns, self.service.config)

    async def history(self, topic: TopicName) -> list[StoredSchema]:
        return await self.storage.history(topic)

    async def latest(self, topic: TopicName) -> StoredSchema | None:
        entries = live(await self.storage.history(topic))
        return entries[-1] if entries else None

    async def get(self, topic: TopicName, version: int | None) -> StoredSchema | None:
        """A version (None: the latest live one); None when there is no such schema or it was deleted."""
        if version is None:
            return await self.latest(topic)
        for entry in await self.storage.history(topic):
            if entry.version == version:
                return None if entry.deleted else entry
        return None

    async def register(self, topic: TopicName, info: SchemaInfo, *, from_client: bool = True,
                       namespace_policies=None) -> int:
        """The version of ``info`` in the topic's history, stored as a new version if need be.
        Raises IncompatibleSchemaError when the policies refuse it."""
        if info.type in AVRO_BASED:
            parse_avro(info.data)  # InvalidSchemaError before anything is stored
        policies = await self.policies(topic, namespace_policies)
        for _ in range(_REGISTER_ATTEMPTS):
            history = await self.storage.history(topic)
            existing = decide(live(history), info, policies, from_client=from_client)
            if existing is not None:
                return existing
            version = history[-1].version + 1 if history else 0
            try:
                await self.storage.append(topic, StoredSchema(version, info, self._clock_ms()))
            except VersionTakenError:
                continue
            return version
        raise NotAllowedError(f"the schema of {topic} kept changing concurrently; retry")

    async def test(self, topic: TopicName, info: SchemaInfo) -> tuple[bool, Strategy, str]:
        """A dry run of ``register`` by an admin: (compatible, strategy, reason)."""
        policies = await self.policies(topic)
        try:
            decide(live(await self.storage.history(topic)), info, policies, from_client=False)
        except IncompatibleSchemaError as exc:
            return False, policies.strategy, str(exc)
        return True, policies.strategy, ""

    async def version_of(self, topic: TopicName, info: SchemaInfo) -> int | None:
        for entry in reversed(live(await self.storage.history(topic))):
            if entry.info.same_as(info):
                return entry.version
        return None

    async def for_producer(self, topic: TopicName, info: SchemaInfo | None, namespace_policies=None) -> int | None:
        """The schema version a producer writes with (None: it has no schema). Registers a new schema; refuses a
        schema-less producer on a topic with a schema when ``schema_validation_enforced``. ``namespace_policies``:
        the loaded topic's, so a schema-less producer costs no metadata read unless validation is enforced."""
        if info is None:
            if (await self.policies(topic, namespace_policies)).validation_enforced and \
                    await self.latest(topic) is not None:
                raise IncompatibleSchemaError(f"{topic} has a schema and schema validation is enforced: "
                                              f"producers must declare a compatible schema")
            return None
        return await self.register(topic, info, namespace_policies=namespace_policies)

    async def for_consumer(self, topic: TopicName, info: SchemaInfo | None, topic_is_idle: bool,
                           namespace_policies=None) -> None:
        """Check a consumer's schema; on an idle topic without a schema, register it (as Pulsar does)."""
        if info is None:
            return
        entries = live(await self.storage.history(topic))
        if not entries:
            if topic_is_idle:
                await self.register(topic, info, namespace_policies=namespace_policies)
            return
        check_reader(entries, info, (await self.policies(topic, namespace_policies)).strategy)

    async def delete(self, topic: TopicName, *, force: bool = False) -> int | None:
        """Delete the topic's schema: a deletion marker as a new version (the numbering goes on); with ``force`` the
        older versions are erased too, leaving the marker so no version number is ever reused. Returns the
        marker's version (None when there was nothing to delete)."""
        for _ in range(_REGISTER_ATTEMPTS):
            history = await self.storage.history(topic)
            if not history or (not force and not live(history)) or (force and len(history) == 1 and history[0].deleted):
                return None
            version = history[-1].version + 1 if live(history) else history[-1].version
            if version != history[-1].version:
                try:
                    await self.storage.append(topic, StoredSchema(version, None, self._clock_ms()))
                except VersionTakenError:
                    continue
            if force:
                await self.storage.delete_before(topic, version)
            return version
        raise NotAllowedError(f"the schema of {topic} kept changing concurrently; retry")
