"""The options of ``format("magnetar")``, checked once, when the query starts.

Names follow the Pulsar Spark connector and Spark's Kafka source. Every
problem is a :class:`MagnetarOptionError` that names the option, raised from
the data source's constructor so Spark reports it before any job runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from urllib.parse import urlparse

from connectors.spark.offsets import Offset, parse_offset, topic_url
from connectors.spark.security import SECURITY_OPTIONS, ClientSecurity, SecurityOptionError, parse_security


class MagnetarOptionError(ValueError):
    """An option is missing, unknown, malformed, or conflicts with another."""


SOURCE_OPTIONS = {
    "service.url", "admin.url", "topic", "topics", "topicsPattern", "subscription", "startingOffsets",
    "endingOffsets", "failOnDataLoss", "maxMessagesPerTrigger", "pollTimeoutMs", "waitingForNonExistedTopic",
    "maxEntriesPerPartition", "minPartitions", "expandSchema", *SECURITY_OPTIONS,
}
SINK_OPTIONS = {"service.url", "admin.url", "topic", "batchingMaxPublishDelayMs", "valueSchema", *SECURITY_OPTIONS}
# Options Spark itself may hand to a data source; they carry no meaning here.
SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}  # compared lower-cased


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    service_url: str
    admin_url: str
    topics: tuple[str, ...]  # full names; empty when a pattern is given
    pattern: re.Pattern | None
    namespace: str | None  # "tenant/ns" the pattern is matched in
    subscription: str
    starting: str | dict[str, Offset]  # "earliest" | "latest" | per topic-partition
    ending: str | dict[str, Offset]
    fail_on_data_loss: bool
    max_messages_per_trigger: int | None
    poll_timeout_ms: int
    wait_for_topic: bool
    max_entries_per_partition: int
    min_partitions: int  # Kafka's option: cut ranges finer until a micro-batch has at least this many tasks
    security: ClientSecurity = ClientSecurity()  # pulsar.client.auth* and tls* (connectors/spark/security.py)
    expand_schema: bool = False  # typed columns from the topic's schema (connectors/spark/schemas.py)


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    service_url: str
    topic: str | None  # None: every row names its own in a `topic` column
    batching_max_publish_delay_ms: int
    security: ClientSecurity = ClientSecurity()
    value_schema: str | None = None  # "avro" | "json": a struct `value` column written as schema'd records


def parse_source_options(raw: dict[str, str]) -> SourceOptions:
    opts = _known(raw, SOURCE_OPTIONS)
    service_url = _service_url(opts)
    given = [name for name in ("topic", "topics", "topicsPattern") if opts.get(name)]
    if len(given) != 1:
        raise MagnetarOptionError("exactly one of 'topic', 'topics' or 'topicsPattern' must be set"
                                  + (f" (got {', '.join(given)})" if given else ""))
    topics: tuple[str, ...] = ()
    pattern = namespace = None
    if given[0] == "topic":
        topics = (topic_url(opts["topic"].strip()),)
    elif given[0] == "topics":
        topics = tuple(dict.fromkeys(topic_url(t.strip()) for t in opts["topics"].split(",") if t.strip()))
        if not topics:
            raise MagnetarOptionError("option 'topics' lists no topic")
    else:
        pattern, namespace = _pattern(opts["topicsPattern"])
    spec = ",".join(topics) if topics else opts["topicsPattern"]
    subscription = opts.get("subscription") or "spark-" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    return SourceOptions(
        service_url=service_url,
        admin_url=_admin_url(opts, service_url),
        topics=topics,
        pattern=pattern,
        namespace=namespace,
        subscription=subscription,
        starting=_offsets(opts, "startingOffsets", "earliest", allow_latest=True),
        ending=_offsets(opts, "endingOffsets", "latest", allow_earliest=False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_messages_per_trigger=_int(opts, "maxMessagesPerTrigger", None),
        poll_timeout_ms=_int(opts, "pollTimeoutMs", 120_000),
        wait_for_topic=_bool(opts, "waitingForNonExistedTopic", False),
        max_entries_per_partition=_int(opts, "maxEntriesPerPartition", 5_000),
        min_partitions=_int(opts, "minPartitions", 1),
        security=_security(opts, service_url),
        expand_schema=_bool(opts, "expandSchema", False),
    )


def parse_sink_options(raw: dict[str, str]) -> SinkOptions:
    opts = _known(raw, SINK_OPTIONS)
    topic = opts.get("topic")
    service_url = _service_url(opts)
    return SinkOptions(service_url=service_url, topic=topic_url(topic.strip()) if topic else None,
                       batching_max_publish_delay_ms=_int(opts, "batchingMaxPublishDelayMs", 10, minimum=0),
                       security=_security(opts, service_url), value_schema=_value_schema(opts))


def _value_schema(opts) -> str | None:
    text = opts.get("valueSchema")
    if text is None:
        return None
    if text.strip().lower() not in ("avro", "json"):
        raise MagnetarOptionError(f"option 'valueSchema' must be avro or json, got {text!r}")
    return text.strip().lower()


# ---- one option each -------------------------------------------------------------------


def _known(raw, allowed: set[str]) -> dict[str, str]:
    opts = {str(k): str(v) for k, v in dict(raw).items()}
    lowered = {name.lower(): name for name in allowed}
    unknown = []
    for key in list(opts):
        if key in allowed or key.lower() in SPARK_OPTIONS:
            continue
        if key.lower() in lowered:  # Spark may lower-case option names: keep ours as documented
            opts[lowered[key.lower()]] = opts.pop(key)
        else:
            unknown.append(key)
    if unknown:
        raise MagnetarOptionError(f"unknown option(s) {', '.join(sorted(unknown))}; "
                                  f"known: {', '.join(sorted(allowed))}")
    return opts


def _service_url(opts) -> str:
    url = opts.get("service.url")
    if not url:
        raise MagnetarOptionError("option 'service.url' is required (e.g. pulsar://localhost:6650)")
    parsed = urlparse(url)
    if parsed.scheme not in ("pulsar", "pulsar+ssl") or not parsed.hostname or not parsed.port:
        raise MagnetarOptionError(f"option 'service.url' must look like pulsar://host:port or "
                                  f"pulsar+ssl://host:port, got {url!r}")
    return url


def _security(opts, service_url: str) -> ClientSecurity:
    try:
        return parse_security(opts, service_url)
    except SecurityOptionError as exc:
        raise MagnetarOptionError(str(exc)) from None


def _admin_url(opts, service_url: str) -> str:
    url = opts.get("admin.url")
    if not url:  # Pulsar's default web port beside the binary one (8443 for https beside pulsar+ssl)
        parsed = urlparse(service_url)
        return f"https://{parsed.hostname}:8443" if parsed.scheme == "pulsar+ssl" else f"http://{parsed.hostname}:8080"
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise MagnetarOptionError(f"option 'admin.url' must look like http://host:port, got {url!r}")
    return url.rstrip("/")


def _pattern(text: str) -> tuple[re.Pattern, str]:
    """A regex over full topic names of one namespace, which the pattern's own prefix names."""
    full = text if "://" in text else f"persistent://public/default/{text}" if "/" not in text else f"persistent://{text}"
    m = re.match(r"persistent://([^/]+)/([^/]+)/", full)
    if not m or any(c in m.group(1) + m.group(2) for c in ".*+?[](){}|\\^$"):
        raise MagnetarOptionError(f"option 'topicsPattern' must name its namespace literally, "
                                  f"e.g. persistent://tenant/ns/prefix-.*, got {text!r}")
    try:
        return re.compile(full), f"{m.group(1)}/{m.group(2)}"
    except re.error as exc:
        raise MagnetarOptionError(f"option 'topicsPattern' is not a valid regex: {exc}") from None


def _offsets(opts, name: str, default: str, allow_earliest=True, allow_latest=True):
    text = opts.get(name, default).strip()
    words = {"earliest"} if allow_earliest else set()
    words |= {"latest"} if allow_latest else set()
    if text in words:
        return text
    if not text.startswith("{"):
        raise MagnetarOptionError(f"option {name!r} must be {' or '.join(sorted(words))} or a JSON object "
                                  f"of message ids per topic-partition, got {text!r}")
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise MagnetarOptionError(f"option {name!r} is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise MagnetarOptionError(f"option {name!r} must be a JSON object")
    out = {}
    for topic, value in spec.items():
        try:
            out[topic_url(topic)] = parse_offset(value)
        except ValueError as exc:
            raise MagnetarOptionError(f"option {name!r}, topic {topic!r}: {exc}") from None
    return out


def _bool(opts, name: str, default: bool) -> bool:
    text = opts.get(name)
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise MagnetarOptionError(f"option {name!r} must be true or false, got {text!r}")


def _int(opts, name: str, default, minimum: int = 1):
    text = opts.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise MagnetarOptionError(f"option {name!r} must be an integer, got {text!r}") from None
    if value < minimum:
        raise MagnetarOptionError(f"option {name!r} must be at least {minimum}, got {value}")
    return value
