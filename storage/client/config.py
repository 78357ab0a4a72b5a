"""Ledger client configuration: one frozen dataclass (STYLE.md 4).

Units are in the names. Defaults follow what a BookKeeper / Pulsar operator
expects: zone rules are *soft* by default (BookKeeper's
``enforceMinNumRacksPerWriteQuorum=false``), so a single-zone development
cluster still works and only logs a warning; production clusters set
``placement_mode="strict"`` to refuse ensembles that would put a whole write
set in one zone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from storage.protocol import DEFAULT_MAX_FRAME_BYTES

STRICT = "strict"
SOFT = "soft"


@dataclass(frozen=True)
class PlacementPolicy:
    """The zone rules placement enforces (see storage.client.placement)."""

    mode: str = SOFT
    min_zones_per_write_set: int = 2
    desired_zones_per_write_set: int = 3
    # Never fewer zones per write set than this, even in soft mode (which may still repeat an upgrade domain):
    # a ledger whose owner named a minimum (requiring_zones). 0: none beyond the mode's.
    required_zones_per_write_set: int = 0

    @property
    def strict(self) -> bool:
        return self.mode == STRICT

    def requiring_zones(self, min_zones: int) -> "PlacementPolicy":
        """This policy for one ledger that must span ``min_zones`` zones per write set: a caller that names a
        minimum (a stream namespace) wants a refusal rather than a ledger below it, whatever the mode. The
        upgrade-domain rule keeps the mode's strictness (soft: bookies without locations still serve)."""
        if min_zones < 1:
            raise ValueError(f"min_zones must be >= 1, got {min_zones}")
        return PlacementPolicy(self.mode, min_zones, max(self.desired_zones_per_write_set, min_zones), min_zones)

    def validate(self) -> "PlacementPolicy":
        if self.mode not in (STRICT, SOFT):
            raise ValueError(f"placement mode must be {STRICT!r} or {SOFT!r}, got {self.mode!r}")
        if self.min_zones_per_write_set < 1:
            raise ValueError("min_zones_per_write_set must be >= 1")
        if not 0 <= self.required_zones_per_write_set <= self.min_zones_per_write_set:
            raise ValueError(f"required_zones_per_write_set ({self.required_zones_per_write_set}) must be in "
                             f"0..min_zones_per_write_set ({self.min_zones_per_write_set})")
        if self.desired_zones_per_write_set < self.min_zones_per_write_set:
            raise ValueError(
                f"desired_zones_per_write_set ({self.desired_zones_per_write_set}) must be >= "
                f"min_zones_per_write_set ({self.min_zones_per_write_set})"
            )
        return self


@dataclass(frozen=True)
class ClientConfig:
    # timeouts
    add_entry_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    connect_timeout_s: float = 5.0

    # placement (zone awareness)
    placement_mode: str = SOFT
    min_zones_per_write_set: int = 2
    desired_zones_per_write_set: int = 3

    # ensemble change and recovery
    max_ensemble_change_attempts: int = 5  # metadata-conflict / replacement retries per change
    recovery_max_attempts: int = 10  # whole recovery attempts before giving up
    recovery_read_parallelism: int = 16  # entries read ahead while recovering

    # one backoff shape for every retry loop in the client (metadata conflicts, recovery, LAC polling)
    backoff_initial_s: float = 0.01
    backoff_max_s: float = 0.5
    backoff_multiplier: float = 2.0
    backoff_jitter: float = 0.2  # +/- fraction, drawn from the injected rng

    # reads
    batch_read_max_entries: int = 128
    batch_read_max_bytes: int = 4 * 1024 * 1024

    # limits
    max_entry_bytes: int = 5 * 1024 * 1024
    # Adds in flight on one ledger handle (sent, not yet acknowledged: an ensemble change can hold them all).
    # Over it, add_entry waits for room up to wait_timeout_on_backpressure_s (BookKeeper's
    # waitTimeoutOnBackpressureMs) and add_entry_async fails at once, both with TooManyPendingAddsError.
    max_pending_adds_per_ledger: int = 10_000
    max_pending_add_bytes_per_ledger: int = 256 * 1024 * 1024
    wait_timeout_on_backpressure_s: float = 30.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    # Large adds (256 KiB and up) go to each bookie at most this fast while small adds are flowing too
    # (storage/client/pacing.py); 0 = never paced.
    bulk_add_pace_bytes_per_s: int = 64 * 1024 * 1024
    # A file whose one shared timestamp tells the processes that name it when any of them last sent a small add
    # (pacing.SmallAddBeacon), so each paces its large adds for the others' small ones too. None: this process's own.
    small_add_beacon_path: str | None = None

    # TLS to the bookies (storage/tls.py): set the trust store to dial every bookie with TLS; a certificate and
    # key for bookies that require client authentication. Pulsar's bookkeeperTLSTrustCertsFilePath,
    # bookkeeperTLSCertificateFilePath and bookkeeperTLSKeyFilePath.
    tls_trust_certs_file_path: str | None = None
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None

    @property
    def placement(self) -> PlacementPolicy:
        return PlacementPolicy(self.placement_mode, self.min_zones_per_write_set, self.desired_zones_per_write_set)

    def validate(self) -> "ClientConfig":
        """Cross-field checks. Returns self; raises ValueError naming the field."""
        for name in ("add_entry_timeout_s", "read_timeout_s", "connect_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        self.placement.validate()
        if self.max_ensemble_change_attempts < 1:
            raise ValueError("max_ensemble_change_attempts must be >= 1")
        if self.recovery_max_attempts < 1:
            raise ValueError("recovery_max_attempts must be >= 1")
        if self.recovery_read_parallelism < 1:
            raise ValueError("recovery_read_parallelism must be >= 1")
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            raise ValueError(
                f"need 0 < backoff_initial_s <= backoff_max_s, got {self.backoff_initial_s} and {self.backoff_max_s}"
            )
        if self.backoff_multiplier < 1:
            raise ValueError("backoff_multiplier must be >= 1")
        if not 0 <= self.backoff_jitter < 1:
            raise ValueError("backoff_jitter must be in [0, 1)")
        if self.batch_read_max_entries < 1 or self.batch_read_max_bytes < 1:
            raise ValueError("batch_read_max_entries and batch_read_max_bytes must be >= 1")
        if self.max_entry_bytes < 1:
            raise ValueError("max_entry_bytes must be >= 1")
        if self.bulk_add_pace_bytes_per_s < 0:
            raise ValueError("bulk_add_pace_bytes_per_s must be >= 0 (0 = never paced)")
        if self.max_pending_adds_per_ledger < 1 or self.max_pending_add_bytes_per_ledger < 1:
            raise ValueError("max_pending_adds_per_ledger and max_pending_add_bytes_per_ledger must be >= 1")
        if self.wait_timeout_on_backpressure_s < 0:
            raise ValueError("wait_timeout_on_backpressure_s must be >= 0")
        if (self.tls_certificate_file_path is None) != (self.tls_key_file_path is None):
            raise ValueError("tls_certificate_file_path and tls_key_file_path go together")
        if self.tls_certificate_file_path is not None and self.tls_trust_certs_file_path is None:
            raise ValueError("a TLS client certificate needs tls_trust_certs_file_path (TLS to the bookies)")
        if self.max_entry_bytes + 1024 > self.max_frame_bytes:
            raise ValueError(
                f"max_entry_bytes ({self.max_entry_bytes}) plus framing must fit in max_frame_bytes ({self.max_frame_bytes})"
            )
        return self


def with_changes(config: ClientConfig, **changes) -> ClientConfig:
    return dataclasses.replace(config, **changes).validate()
