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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from storage.config import load_layered
from storage.protocol import DEFAULT_MAX_BATCH_READ_BYTES, DEFAULT_MAX_BATCH_READ_ENTRIES, RequestLimits
from storage.network_location import DEFAULT_NETWORK_LOCATION, parse_network_location


@dataclass(frozen=True)
class BookieConfig:
    metadata_store_url: str
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 3181
    http_port: int = 8000
    advertised_address: str | None = None  # host clients dial; default: host
    advertised_port: int | None = None  # port clients dial (a forwarder in front of this bookie); default: port
    bookie_id: str | None = None  # default: "<advertised_address>:<port>"
    network_location: str = DEFAULT_NETWORK_LOCATION
    journal_dir: Path | None = None  # default: <data_dir>/journal
    ledger_dir: Path | None = None  # default: <data_dir>/ledgers

    # journal and group commit
    journal_sync_data: bool = True
    journal_max_group_wait_ms: float = 2.0
    journal_buffered_writes_threshold_bytes: int = 512 * 1024
    journal_flush_when_queue_empty: bool = False
    journal_max_file_size_bytes: int = 512 * 1024 * 1024
    # ADDs this large or larger go to a journal lane of their own (<journal_dir>/large, journal_lanes.py), so a
    # small add never waits behind a large one's write and fdatasync; 0 puts every record in one lane.
    journal_large_record_bytes: int = 256 * 1024
    # The large lane and the entry logs write to the device in steps of this many bytes, each waited for
    # (sync_file_range), so a small add's fdatasync on the same disk waits behind one step at most; 0: one go.
    write_back_step_bytes: int = 256 * 1024
    # The large lane's writer and the storage thread (flush to entry logs, checkpoints, compaction) run this many
    # nice steps below the threads that acknowledge small adds (thread_priority.py); 0: all at one priority.
    background_write_nice: int = 10
    # Journal damage other than a torn tail (journal_damage.py): "auto" starts
    # read-only unless a ledger here may have no other copy, then refuses;
    # "refuse" always refuses to start.
    journal_corruption_policy: str = "auto"

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

    # autorecovery (storage/autorecovery): BookKeeper's autoRecoveryDaemonEnabled,
    # lostBookieRecoveryDelay, openLedgerRereplicationGracePeriod, auditorPeriodicCheckInterval
    autorecovery_enabled: bool = True
    lost_bookie_recovery_delay_s: float = 60.0
    open_ledger_rereplication_grace_period_s: float = 30.0
    auditor_periodic_check_interval_s: float = 86_400.0
    replication_poll_interval_s: float = 1.0
    # scrubbing (BookKeeper's localScrubPeriod, localScrubRateLimit): 0 disables it
    local_scrub_period_s: float = 0.0
    local_scrub_rate_limit_entries_per_s: float = 60.0

    # protocol. Request field bounds: storage.protocol.bounded. A BATCH_READ asking for more is served less:
    # max_batch_read_size_bytes is BookKeeper's maxBatchReadSize, max_batch_read_entries ours (BookKeeper bounds
    # the count only through the size; here the index walk is per entry, so the count needs its own cap).
    max_frame_bytes: int = 8 * 1024 * 1024
    max_batch_read_size_bytes: int = DEFAULT_MAX_BATCH_READ_BYTES
    max_batch_read_entries: int = DEFAULT_MAX_BATCH_READ_ENTRIES
    # Requests of one connection being served at once; beyond it the bookie stops reading that connection
    # (BookKeeper bounds the same bookie-wide with maxAddsInProgressLimit / maxReadsInProgressLimit).
    max_requests_in_flight_per_connection: int = 4096
    # ... and the memory they may hold (bodies of adds, batch reads' max_bytes; server.request_charge).
    max_bytes_in_flight_per_connection: int = 64 * 1024 * 1024
    session_timeout_s: float = 10.0

    # security (docs/security.md "Storage"): the bearer token the HTTP endpoints that change state require;
    # None: only loopback clients may change state (standalone). Set it by TOML or MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN,
    # not a flag, so it never shows in a process listing.
    http_admin_token: str | None = field(default=None, repr=False)
    # TLS on the data port (storage/tls.py), BookKeeper's names: tlsCertificatePath, tlsKeyStore (a PEM key),
    # tlsTrustStore (PEM CA certificates), tlsClientAuthentication. With a certificate the port serves TLS only.
    # The bookie's own ledger client (autorecovery) then dials its peers with TLS too, trusting tls_trust_store
    # and presenting its own certificate: one CA for the cluster signs bookie and client certificates.
    tls_certificate_path: str | None = None
    tls_key_store: str | None = None
    tls_trust_store: str | None = None
    tls_client_authentication: bool = False

    @property
    def tls_enabled(self) -> bool:
        return self.tls_certificate_path is not None

    def client_tls(self) -> dict:
        """ClientConfig fields for this bookie's own ledger client (autorecovery), to reach TLS peers."""
        if not self.tls_enabled:
            return {}
        return {"tls_trust_certs_file_path": self.tls_trust_store, "tls_certificate_file_path": self.tls_certificate_path,
                "tls_key_file_path": self.tls_key_store}

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
            object.__setattr__(self, "bookie_id", f"{self.advertised_address}:{self.advertised_port or self.port}")

    @property
    def request_limits(self) -> RequestLimits:
        # A full batch (bodies, msgpack's few bytes per body, the frame's header) must fit in one frame: with a
        # small max_frame_bytes the batch shrinks to fit (a batch always carries at least one entry).
        fits = self.max_frame_bytes - 8 * self.max_batch_read_entries - 64
        return RequestLimits(max(1, min(self.max_batch_read_size_bytes, fits)), self.max_batch_read_entries)

    @property
    def zone(self) -> str:
        return parse_network_location(self.network_location)[0]

    def is_large_entry(self, entry_bytes: int) -> bool:
        """An entry of the large journal lane, which also stops short of the write cache's last quarter."""
        return 0 < self.journal_large_record_bytes <= entry_bytes

    def validate(self) -> "BookieConfig":
        """Cross-field checks. Returns self; raises ValueError naming the field."""
        parse_network_location(self.network_location)
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.advertised_port is not None and not 0 < self.advertised_port < 65536:
            raise ValueError(f"advertised_port must be in 1..65535, got {self.advertised_port}")
        if not 0 <= self.http_port < 65536:
            raise ValueError(f"http_port must be in 0..65535, got {self.http_port}")
        if self.journal_max_group_wait_ms < 0:
            raise ValueError("journal_max_group_wait_ms must be >= 0")
        if self.journal_corruption_policy not in ("auto", "refuse"):
            raise ValueError(
                f"journal_corruption_policy must be 'auto' or 'refuse', got {self.journal_corruption_policy!r}"
            )
        if self.write_back_step_bytes < 0:
            raise ValueError(f"write_back_step_bytes must be >= 0 (0: no steps), got {self.write_back_step_bytes}")
        if not 0 <= self.background_write_nice <= 19:
            raise ValueError(f"background_write_nice must be in 0..19 (0: no change), got {self.background_write_nice}")
        if self.journal_large_record_bytes < 0:
            raise ValueError(f"journal_large_record_bytes must be >= 0 (0: one lane), got {self.journal_large_record_bytes}")
        if self.journal_buffered_writes_threshold_bytes <= 0:
            raise ValueError("journal_buffered_writes_threshold_bytes must be > 0")
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1:
            raise ValueError(
                "need 0 < disk_usage_lwm_threshold <= disk_usage_threshold <= 1, got "
                f"{self.disk_usage_lwm_threshold} and {self.disk_usage_threshold}"
            )
        if not 0 <= self.compaction_threshold <= 1:
            raise ValueError("compaction_threshold must be in [0, 1]")
        if self.lost_bookie_recovery_delay_s < 0 or self.open_ledger_rereplication_grace_period_s < 0:
            raise ValueError("lost_bookie_recovery_delay_s and open_ledger_rereplication_grace_period_s must be >= 0")
        if self.auditor_periodic_check_interval_s <= 0 or self.replication_poll_interval_s <= 0:
            raise ValueError("auditor_periodic_check_interval_s and replication_poll_interval_s must be > 0")
        if self.local_scrub_period_s < 0 or self.local_scrub_rate_limit_entries_per_s <= 0:
            raise ValueError("local_scrub_period_s must be >= 0 and local_scrub_rate_limit_entries_per_s > 0")
        if self.max_frame_bytes < 1024:
            raise ValueError("max_frame_bytes must be >= 1024")
        if self.max_batch_read_size_bytes < 1 or self.max_batch_read_entries < 1:
            raise ValueError("max_batch_read_size_bytes and max_batch_read_entries must be >= 1")
        if self.max_requests_in_flight_per_connection < 2 or self.max_bytes_in_flight_per_connection < 1:
            raise ValueError("max_requests_in_flight_per_connection must be >= 2, "
                             "max_bytes_in_flight_per_connection >= 1")
        if (self.tls_certificate_path is None) != (self.tls_key_store is None):
            raise ValueError("tls_certificate_path and tls_key_store go together")
        if self.tls_enabled and self.tls_trust_store is None:
            raise ValueError("a TLS bookie needs tls_trust_store: the CA its peers' (and clients') certificates "
                             "chain to, which its own autorecovery client trusts")
        if self.tls_client_authentication and not self.tls_enabled:
            raise ValueError("tls_client_authentication needs tls_certificate_path and tls_key_store")
        if self.http_admin_token is not None and (not self.http_admin_token.strip() or
                                                  any(c.isspace() for c in self.http_admin_token)):
            raise ValueError("http_admin_token must be non-empty and contain no whitespace")
        if not self.bookie_id or "/" in self.bookie_id:
            raise ValueError(f"bookie_id {self.bookie_id!r} must be non-empty and contain no '/'")
        return self


_ENV_PREFIX = "MAGNETAR_BOOKIE_"


def load_config(
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BookieConfig:
    """Defaults < TOML file < MAGNETAR_BOOKIE_* env < overrides. Raises ValueError on unknown keys."""
    return load_layered(
        BookieConfig, section="bookie", env_prefix=_ENV_PREFIX, toml_path=toml_path,
        overrides=overrides, environ=environ, required=("metadata_store_url", "data_dir"),
    )


def with_changes(config: BookieConfig, **changes: Any) -> BookieConfig:
    return dataclasses.replace(config, **changes).validate()
