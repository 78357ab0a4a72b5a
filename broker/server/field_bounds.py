"""Bounds on the fields of PRODUCER and SUBSCRIBE that the broker acts on or keeps (names, properties, key-hash
ranges, priority levels, start ids). Pure checks: each raises NotAllowedError naming the field, before anything
is created, so a careless or hostile client cannot make the broker hold unbounded state for it."""

from __future__ import annotations

from broker.errors import NotAllowedError

MAX_NAME_CHARS = 1024  # topic, subscription, producer and consumer names
MAX_PROPERTIES = 256  # entries of one metadata / properties map
MAX_PROPERTIES_BYTES = 64 * 1024  # keys and values of one map together
MAX_HASH_RANGES = 1024  # a sticky Key_Shared consumer's ranges
MAX_HASH = 65535  # Key_Shared hash ranges live in 0..65535
MAX_PRIORITY_LEVEL = 1_000_000
MAX_BATCH_INDEX = 1 << 20  # the cursor's own bound on batch indexes


def check_producer(c) -> None:
    _name("topic", c.topic)
    if c.HasField("producer_name"):
        _name("producer_name", c.producer_name)
    _properties("metadata", c.metadata)


def check_subscribe(c) -> None:
    _name("topic", c.topic)
    _name("subscription", c.subscription)
    if c.HasField("consumer_name"):
        _name("consumer_name", c.consumer_name)
    _properties("metadata", c.metadata)
    _properties("subscription_properties", c.subscription_properties)
    if c.HasField("priority_level") and not 0 <= c.priority_level <= MAX_PRIORITY_LEVEL:
        raise NotAllowedError(f"priority_level must be in 0..{MAX_PRIORITY_LEVEL}, got {c.priority_level}")
    if c.HasField("start_message_id"):
        start = c.start_message_id
        if start.HasField("batch_index") and not -1 <= start.batch_index < MAX_BATCH_INDEX:
            raise NotAllowedError(f"start_message_id.batch_index must be in -1..{MAX_BATCH_INDEX - 1}, "
                                  f"got {start.batch_index}")
    if c.HasField("keySharedMeta"):
        ranges = c.keySharedMeta.hashRanges
        if len(ranges) > MAX_HASH_RANGES:
            raise NotAllowedError(f"keySharedMeta.hashRanges has {len(ranges)} ranges; at most {MAX_HASH_RANGES}")
        for r in ranges:
            if not 0 <= r.start <= r.end <= MAX_HASH:
                raise NotAllowedError(f"keySharedMeta.hashRanges [{r.start}, {r.end}] is not a range in 0..{MAX_HASH}")


def _name(field: str, value: str) -> None:
    if len(value) > MAX_NAME_CHARS:
        raise NotAllowedError(f"{field} is {len(value)} characters; at most {MAX_NAME_CHARS}")


def _properties(field: str, entries) -> None:
    if len(entries) > MAX_PROPERTIES:
        raise NotAllowedError(f"{field} has {len(entries)} entries; at most {MAX_PROPERTIES}")
    size = sum(len(kv.key) + len(kv.value) for kv in entries)
    if size > MAX_PROPERTIES_BYTES:
        raise NotAllowedError(f"{field} holds {size} bytes; at most {MAX_PROPERTIES_BYTES}")
