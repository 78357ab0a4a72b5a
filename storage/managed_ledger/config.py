"""Managed-ledger configuration: one frozen dataclass, units in the names.

Defaults are Pulsar's (managedLedgerMaxEntriesPerLedger=50000,
managedLedgerMaxSizePerLedgerMbytes=2048, min/max ledger rollover 10 min /
4 h, retention 0/0 = delete what every cursor has consumed; -1 = keep forever).

Adds are bounded by ``max_pending_add_entries`` / ``max_pending_add_bytes``:
an add over them waits its turn. Pulsar puts no bound here and relies on the
broker's (maxPendingPublishRequestsPerConnection,
maxMessagePublishBufferSizeInMB), which pause reading from producers; this
bound is the same backpressure one layer down, for the many producers of one
topic (and any other caller), and it never fails an add.

Cursor state is never capped: Pulsar's ``managedLedgerMaxUnackedRangesToPersist``
(drop ranges beyond 10,000) has no equivalent here. What remains bounded is
where a big state goes: the metadata-store snapshot holds the ranges only up
to ``max_unacked_ranges_to_persist_in_metadata_store`` (Pulsar's
``managedLedgerMaxUnackedRangesToPersistInMetadataStore``, 1000); the cursor
ledger always holds them all, in entries of at most ``cursor_state_chunk_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.errors import InvalidQuorumError, ManagedLedgerConfigError
from storage.ledger_metadata import validate_quorum

MIN_CHUNK_BYTES = 256
MAX_CHUNK_BYTES = 4 * 1024 * 1024  # room under a 5 MiB entry limit for the chunk's framing


@dataclass(frozen=True)
class ManagedLedgerConfig:
    ensemble_size: int = 2
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    min_zones: int | None = None  # zones per write set of its data ledgers, strictly; None = the ledger client's rule
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_mb: float = 2048  # fractions allowed: log streams roll by bytes
    min_ledger_rollover_time_s: float = 600
    max_ledger_rollover_time_s: float = 14_400
    retention_time_s: float = 0
    retention_size_mb: float = 0
    cursor_max_entries_per_ledger: int = 50_000
    cursor_max_size_per_ledger_mb: float = 64  # a cursor ledger is also replaced once this much state was written to it
    cursor_state_chunk_bytes: int = 1024 * 1024  # well under the ledger client's 5 MiB max_entry_bytes
    max_unacked_ranges_to_persist_in_metadata_store: int = 1000
    cache_size_mb: float = 64
    # Adds taken and not yet answered (queued for a ledger, in flight, waiting for a retry). Over it an add waits
    # its turn (ManagedLedger.add_entry): backpressure, never an error. Keep it within the ledger client's
    # max_pending_adds_per_ledger / max_pending_add_bytes_per_ledger, so a handle never refuses the pipeline.
    max_pending_add_entries: int = 5_000
    max_pending_add_bytes: int = 128 * 1024 * 1024
    # Writes of a cursor's acknowledgements per second (mark_delete_rate.py); 0 = every ack is written at once.
    # Pulsar's ManagedLedgerConfig.throttleMarkDelete: 0 here, the broker sets its own default (1.0).
    mark_delete_rate_per_s: float = 0.0

    def validate(self) -> "ManagedLedgerConfig":
        """Returns self; raises ManagedLedgerConfigError naming the field."""
        try:
            validate_quorum(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
        except InvalidQuorumError as exc:
            raise ManagedLedgerConfigError(str(exc)) from exc
        if self.min_zones is not None and not 1 <= self.min_zones <= self.write_quorum_size:
            raise ManagedLedgerConfigError(f"min_zones must be in 1..write_quorum_size ({self.write_quorum_size}), "
                                           f"got {self.min_zones}")
        for name in ("max_entries_per_ledger", "cursor_max_entries_per_ledger"):
            if getattr(self, name) < 1:
                raise ManagedLedgerConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_size_per_ledger_mb <= 0:
            raise ManagedLedgerConfigError(f"max_size_per_ledger_mb must be > 0, got {self.max_size_per_ledger_mb}")
        if self.cursor_max_size_per_ledger_mb <= 0:
            raise ManagedLedgerConfigError("cursor_max_size_per_ledger_mb must be > 0")
        if self.max_unacked_ranges_to_persist_in_metadata_store < 0:
            raise ManagedLedgerConfigError("max_unacked_ranges_to_persist_in_metadata_store must be >= 0")
        if not MIN_CHUNK_BYTES <= self.cursor_state_chunk_bytes <= MAX_CHUNK_BYTES:
            raise ManagedLedgerConfigError(
                f"cursor_state_chunk_bytes must be in [{MIN_CHUNK_BYTES}, {MAX_CHUNK_BYTES}], got {self.cursor_state_chunk_bytes}")
        if not 0 <= self.min_ledger_rollover_time_s <= self.max_ledger_rollover_time_s:
            raise ManagedLedgerConfigError("need 0 <= min_ledger_rollover_time_s <= max_ledger_rollover_time_s")
        for name in ("retention_time_s", "retention_size_mb"):
            if getattr(self, name) < -1:
                raise ManagedLedgerConfigError(f"{name} must be >= 0, or -1 for unlimited")
        if self.cache_size_mb < 0:
            raise ManagedLedgerConfigError("cache_size_mb must be >= 0")
        if not 0 <= self.mark_delete_rate_per_s <= 1e9:  # also refuses NaN
            raise ManagedLedgerConfigError(f"mark_delete_rate_per_s must be in 0..1e9, got {self.mark_delete_rate_per_s}")
        if self.max_pending_add_entries < 1 or self.max_pending_add_bytes < 1:
            raise ManagedLedgerConfigError("max_pending_add_entries and max_pending_add_bytes must be >= 1")
        return self

    @property
    def max_size_per_ledger_bytes(self) -> int:
        return int(self.max_size_per_ledger_mb * 1024 * 1024)
