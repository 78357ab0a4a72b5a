"""Names, metadata documents and policies of stream namespaces and streams: pure, tested from tables.

A stream namespace is a Pulsar namespace (``tenant/ns``; a bare ``ns`` means
``public/ns``), so its streams are placed on brokers by the same bundle
ownership as its topics. Its stream policies live at
``/streams/<tenant>/<ns>`` and each stream's document at
``/streams/<tenant>/<ns>/<stream>`` (writer epoch, truncation point, policy
overrides), both changed only by conditional writes. A stream's ledgers are
the managed ledger ``<tenant>/<ns>/stream/<stream>``.

Policies: placement (E/Qw/Qa, minimum zones per write set), rolling (entries,
bytes, age) and retention (time, size; -1 = unlimited). A stream inherits
its namespace's and may override rolling and retention. ``ml_config`` turns
the effective policies into the managed ledger's configuration.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from broker.streams.errors import invalid
from magnetar.streams import stream_api_pb2 as pb
from magnetar.topic_name import DEFAULT_TENANT, NamespaceName, TopicName
from storage.managed_ledger import ManagedLedgerConfig

ROOT = "/streams"
BROKERS_ROOT = "/stream-api/brokers"  # ephemeral: each broker's stream address, for redirects
MAX_NAME_CHARS = 256
MAX_QUORUM = 16
MAX_LEDGER_BYTES = 2 * 1024 * 1024 * 1024
MAX_LEDGER_ENTRIES = 10_000_000
_NAME = re.compile(r"^[-=:.\w]+$")


def parse_namespace(text: str) -> NamespaceName:
    if not isinstance(text, str) or not text or len(text) > MAX_NAME_CHARS:
        raise invalid(f"invalid namespace {text!r}: 1..{MAX_NAME_CHARS} characters, <tenant>/<ns> or <ns>")
    try:
        return NamespaceName.parse(text if "/" in text else f"{DEFAULT_TENANT}/{text}")
    except ValueError as exc:
        raise invalid(str(exc)) from exc


def check_stream_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name or "") or len(name) > MAX_NAME_CHARS or name in (".", ".."):
        raise invalid(f"invalid stream name {name!r}: 1..{MAX_NAME_CHARS} letters, digits and -=:._")
    return name


def namespace_path(ns: NamespaceName) -> str:
    return f"{ROOT}/{ns.tenant}/{ns.namespace}"


def stream_path(ns: NamespaceName, stream: str) -> str:
    return f"{namespace_path(ns)}/{stream}"


def managed_ledger_name(ns: NamespaceName, stream: str) -> str:
    return f"{ns.tenant}/{ns.namespace}/stream/{stream}"


def ownership_name(ns: NamespaceName, stream: str) -> TopicName:
    """The name whose bundle owns the stream (hashed like a topic's; it names no topic)."""
    return TopicName(ns.tenant, ns.namespace, stream)


@dataclass(frozen=True)
class Placement:
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    min_zones: int = 2

    def validate(self) -> "Placement":
        e, w, a = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not (MAX_QUORUM >= e >= w >= a >= 1):
            raise invalid(f"placement needs {MAX_QUORUM} >= ensemble_size >= write_quorum >= ack_quorum >= 1, got E{e}/Qw{w}/Qa{a}")
        if not 1 <= self.min_zones <= w:
            raise invalid(f"min_zones must be in 1..write_quorum ({w}), got {self.min_zones}")
        return self


@dataclass(frozen=True)
class Rolling:
    max_entries: int = 50_000
    max_bytes: int = 256 * 1024 * 1024
    max_age_s: float = 4 * 3600.0

    def validate(self) -> "Rolling":
        if not 1 <= self.max_entries <= MAX_LEDGER_ENTRIES:
            raise invalid(f"rolling max_entries must be in 1..{MAX_LEDGER_ENTRIES}, got {self.max_entries}")
        if not 1024 <= self.max_bytes <= MAX_LEDGER_BYTES:
            raise invalid(f"rolling max_bytes must be in 1 KiB..2 GiB, got {self.max_bytes}")
        if not 1.0 <= self.max_age_s <= 30 * 86400:
            raise invalid(f"rolling max_age_s must be in 1 s..30 days, got {self.max_age_s}")
        return self


@dataclass(frozen=True)
class Retention:
    time_s: float = -1.0  # -1: unlimited; a stream keeps everything until truncated unless told otherwise
    size_bytes: int = -1

    def validate(self) -> "Retention":
        if self.time_s < 0 and self.time_s != -1:
            raise invalid(f"retention time_s must be >= 0 or -1 (unlimited), got {self.time_s}")
        if self.size_bytes < 0 and self.size_bytes != -1:
            raise invalid(f"retention size_bytes must be >= 0 or -1 (unlimited), got {self.size_bytes}")
        return self


@dataclass(frozen=True)
class Policies:
    placement: Placement = field(default_factory=Placement)
    rolling: Rolling = field(default_factory=Rolling)
    retention: Retention = field(default_factory=Retention)

    def validate(self) -> "Policies":
        self.placement.validate()
        self.rolling.validate()
        self.retention.validate()
        return self

    def to_doc(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_doc(cls, doc: dict) -> "Policies":
        return cls(Placement(**doc.get("placement", {})), Rolling(**doc.get("rolling", {})),
                   Retention(**doc.get("retention", {})))

    def with_overrides(self, overrides: dict) -> "Policies":
        """``overrides``: {"rolling": {...}, "retention": {...}} of set fields only (a stream's document)."""
        return Policies(self.placement, dataclasses.replace(self.rolling, **overrides.get("rolling", {})),
                        dataclasses.replace(self.retention, **overrides.get("retention", {}))).validate()

    def ml_config(self, cache_size_mb: float) -> ManagedLedgerConfig:
        p, r, t = self.placement, self.rolling, self.retention
        return ManagedLedgerConfig(
            ensemble_size=p.ensemble_size, write_quorum_size=p.write_quorum, ack_quorum_size=p.ack_quorum,
            min_zones=p.min_zones, max_entries_per_ledger=r.max_entries, max_size_per_ledger_mb=r.max_bytes / (1024 * 1024),
            min_ledger_rollover_time_s=0, max_ledger_rollover_time_s=r.max_age_s,
            retention_time_s=t.time_s, retention_size_mb=t.size_bytes / (1024 * 1024) if t.size_bytes >= 0 else -1,
            cache_size_mb=cache_size_mb,
        ).validate()

    def to_pb(self) -> pb.NamespacePolicies:
        p, r, t = self.placement, self.rolling, self.retention
        return pb.NamespacePolicies(
            placement=pb.PlacementPolicy(ensemble_size=p.ensemble_size, write_quorum=p.write_quorum,
                                         ack_quorum=p.ack_quorum, min_zones=p.min_zones),
            rolling=pb.RollingPolicy(max_entries=r.max_entries, max_bytes=r.max_bytes, max_age_s=r.max_age_s),
            retention=pb.RetentionPolicy(time_s=t.time_s, size_bytes=t.size_bytes))


def _set_fields(message, names: tuple[str, ...]) -> dict:
    return {name: getattr(message, name) for name in names if message.HasField(name)}


def overrides_from_pb(rolling: pb.RollingPolicy | None, retention: pb.RetentionPolicy | None) -> dict:
    """The fields a request sets, as a stream document's overrides."""
    out = {}
    if rolling is not None and (fields := _set_fields(rolling, ("max_entries", "max_bytes", "max_age_s"))):
        out["rolling"] = fields
    if retention is not None and (fields := _set_fields(retention, ("time_s", "size_bytes"))):
        out["retention"] = fields
    return out


def namespace_policies_from_pb(request: pb.NamespacePolicies, defaults: Policies) -> Policies:
    """A new namespace's policies: the request's fields over ``defaults`` (placement fields 0 = default)."""
    placement = defaults.placement
    if request.HasField("placement"):
        given = {k: v for k, v in (("ensemble_size", request.placement.ensemble_size),
                                   ("write_quorum", request.placement.write_quorum),
                                   ("ack_quorum", request.placement.ack_quorum),
                                   ("min_zones", request.placement.min_zones)) if v}
        placement = dataclasses.replace(placement, **given)
        if "min_zones" not in given:  # as many zones as the write set allows, up to the default
            placement = dataclasses.replace(placement, min_zones=min(defaults.placement.min_zones, placement.write_quorum))
    base = Policies(placement, defaults.rolling, defaults.retention)
    overrides = overrides_from_pb(request.rolling if request.HasField("rolling") else None,
                                  request.retention if request.HasField("retention") else None)
    return base.with_overrides(overrides)


def dump(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


def load(data: bytes) -> dict:
    return json.loads(data) if data else {}
