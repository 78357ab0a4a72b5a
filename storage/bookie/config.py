"""Bookie configuration: one frozen dataclass, loaded in exactly one place.

``load_config(toml_path, overrides, environ)`` merges, lowest to highest
precedence: dataclass defaults, the TOML file (keys are the field names),
``MAGNETAR_BOOKIE_<FIELD>`` environment variables, then explicit overrides
(CLI flags). Units are in the names. Defaults follow BookKeeper's where it
has one (journalMaxGroupWaitMSec=2, journalBufferedWritesThreshold=512 KiB,
diskUsageThreshold=0.95, diskUsageLwmThreshold=0.90).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class BookieConfig:
    metadata_store_url: str
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 3181
    http_port: int = 8000
    advertised_address: str | None = None  # host clients dial; default: host
    bookie_id: str | None = None  # default: "<advertised_address>:<port>"
    network_location: str = "/default-zone/default-upgradedomain"
    journal_dir: Path | None = None  # default: <data_dir>/journal
    ledger_dir: Path | None = None  # default: <data_dir>/ledgers

    # journal and group commit
    journal_sync_data: bool = True
    journal_max_group_wait_ms: float = 2.0
    journal_buffered_writes_threshold_bytes: int = 512 * 1024
    journal_flush_when_queue_empty: bool = False
    journal_max_file_size_bytes: int = 512 * 1024 * 1024

    # ledger storage
    entry_log_max_file_size_bytes: int = 1024 * 1024 * 1024
    flush_interval_ms: int = 1000  # checkpoint: flush ledger storage, trim journal
    write_cache_max_bytes: int = 64 * 1024 * 1024
    read_cache_max_bytes: int = 64 * 1024 * 1024

    # garbage collection and compaction
    gc_interval_ms: int = 60_000
    compaction_threshold: float = 0.5  # rewrite entry logs whose live fraction is below this

    # read-only mode
    read_only_mode_enabled: bool = True
    disk_usage_threshold: float = 0.95
    disk_usage_lwm_threshold: float = 0.90
    disk_check_interval_ms: int = 10_000

    # protocol
    max_frame_bytes: int = 8 * 1024 * 1024
    session_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.journal_dir is None:
            object.__setattr__(self, "journal_dir", self.data_dir / "journal")
        else:
            object.__setattr__(self, "journal_dir", Path(self.journal_dir))
        if self.ledger_dir is None:
            object.__setattr__(self, "ledger_dir", self.data_dir / "ledgers")
        else:
            object.__setattr__(self, "ledger_dir", Path(self.ledger_dir))
        if self.advertised_address is None:
            object.__setattr__(self, "advertised_address", self.host)
        if self.bookie_id is None:
            object.__setattr__(self, "bookie_id", f"{self.advertised_address}:{self.port}")

    @property
    def zone(self) -> str:
        return parse_network_location(self.network_location)[0]

    def validate(self) -> "BookieConfig":
        """Cross-field checks. Returns self; raises ValueError naming the field."""
        parse_network_location(self.network_location)
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if not 0 <= self.http_port < 65536:
            raise ValueError(f"http_port must be in 0..65535, got {self.http_port}")
        if self.journal_max_group_wait_ms < 0:
            raise ValueError("journal_max_group_wait_ms must be >= 0")
        if self.journal_buffered_writes_threshold_bytes <= 0:
            raise ValueError("journal_buffered_writes_threshold_bytes must be > 0")
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1:
            raise ValueError(
                "need 0 < disk_usage_lwm_threshold <= disk_usage_threshold <= 1, got "
                f"{self.disk_usage_lwm_threshold} and {self.disk_usage_threshold}"
            )
        if not 0 <= self.compaction_threshold <= 1:
            raise ValueError("compaction_threshold must be in [0, 1]")
        if self.max_frame_bytes < 1024:
            raise ValueError("max_frame_bytes must be >= 1024")
        if not self.bookie_id or "/" in self.bookie_id:
            raise ValueError(f"bookie_id {self.bookie_id!r} must be non-empty and contain no '/'")
        return self


def parse_network_location(location: str) -> tuple[str, str]:
    """'/zone/upgradeDomain' -> (zone, upgrade_domain). Raises ValueError."""
    parts = location.split("/")
    if len(parts) != 3 or parts[0] != "" or not parts[1] or not parts[2]:
        raise ValueError(f"network location must look like /zone/upgradeDomain, got {location!r}")
    return parts[1], parts[2]


_ENV_PREFIX = "MAGNETAR_BOOKIE_"


def _coerce(name: str, typ: Any, value: Any) -> Any:
    if value is None:
        return None
    text = str(typ)
    if "bool" in text and isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: expected a boolean, got {value!r}")
    try:
        if "Path" in text:
            return Path(value)
        if text.startswith("int") or text == "<class 'int'>":
            return int(value)
        if text.startswith("float") or text == "<class 'float'>":
            return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot use {value!r}: {exc}") from exc
    return value


def load_config(
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BookieConfig:
    """Defaults < TOML file < MAGNETAR_BOOKIE_* env < overrides. Raises ValueError on unknown keys."""
    known = {f.name: f.type for f in fields(BookieConfig)}
    merged: dict[str, Any] = {}
    if toml_path is not None:
        with open(toml_path, "rb") as fh:
            doc = tomllib.load(fh)
        doc = doc.get("bookie", doc)
        for key, value in doc.items():
            if key not in known:
                raise ValueError(f"unknown bookie config key {key!r} in {toml_path}")
            merged[key] = value
    for key, value in (environ if environ is not None else os.environ).items():
        if key.startswith(_ENV_PREFIX):
            name = key[len(_ENV_PREFIX):].lower()
            if name not in known:
                raise ValueError(f"unknown bookie config environment variable {key}")
            merged[name] = value
    for key, value in (overrides or {}).items():
        if key not in known:
            raise ValueError(f"unknown bookie config key {key!r}")
        if value is not None:
            merged[key] = value
    for required in ("metadata_store_url", "data_dir"):
        if required not in merged:
            raise ValueError(f"bookie config needs {required} (flag, env {_ENV_PREFIX}{required.upper()} or TOML)")
    coerced = {k: _coerce(k, known[k], v) for k, v in merged.items()}
    return BookieConfig(**coerced).validate()


def with_changes(config: BookieConfig, **changes: Any) -> BookieConfig:
    return dataclasses.replace(config, **changes).validate()
