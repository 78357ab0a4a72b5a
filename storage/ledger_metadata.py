"""Ledger metadata: the record at ``/ledgers/<hier>/L<id>`` and its state table.

Stored as JSON so ``zkCli.sh get`` is readable. The metadata changes only by
conditional writes on the node's version (DESIGN invariant 4); whoever loses a
race re-reads and decides again.

State table (STYLE.md 2). Only the ledger client changes a ledger's state:

    OPEN         -> IN_RECOVERY   a reader starts recovery (fences the writer)
    OPEN         -> CLOSED        the writer closes the ledger
    IN_RECOVERY  -> IN_RECOVERY   a second recoverer takes over
    IN_RECOVERY  -> CLOSED        recovery finished: last entry id is final

``ensembles`` is a list of fragments ``(first_entry_id, (bookie_id, ...))``;
an ensemble change appends a fragment starting at the first entry the new
ensemble writes. The fragment for entry e is the last one whose first entry
id is <= e.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field, replace

from storage.errors import InvalidQuorumError, LedgerMetadataError


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


_TRANSITIONS = {
    (LedgerState.OPEN, LedgerState.IN_RECOVERY),
    (LedgerState.OPEN, LedgerState.CLOSED),
    (LedgerState.IN_RECOVERY, LedgerState.IN_RECOVERY),
    (LedgerState.IN_RECOVERY, LedgerState.CLOSED),
}


def check_transition(old: LedgerState, new: LedgerState) -> None:
    if (old, new) not in _TRANSITIONS:
        raise LedgerMetadataError(f"illegal ledger state transition {old.value} -> {new.value}")


def validate_quorum(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    """The one check of a ledger's sizes: E >= Qw >= Qa >= 1, all integers. Raises InvalidQuorumError.

    The ledger client checks before creating a ledger; configurations that hold
    sizes (the managed ledger's, and through it the broker's) check at load.
    """
    sizes = (ensemble_size, write_quorum_size, ack_quorum_size)
    if not all(isinstance(n, int) for n in sizes) or not ensemble_size >= write_quorum_size >= ack_quorum_size >= 1:
        raise InvalidQuorumError(
            f"need ensemble >= write quorum >= ack quorum >= 1, got {ensemble_size}/{write_quorum_size}/{ack_quorum_size}"
        )


def master_key(password: bytes) -> bytes:
    """The key bookies check on every add and fence: a digest of the ledger password."""
    return hashlib.sha256(b"magnetar-ledger:" + password).digest()


@dataclass(frozen=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    password: bytes
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = "CRC32C"
    ctime_ms: int = 0
    custom: dict = field(default_factory=dict)

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        chosen = self.ensembles[0][1]
        for first, bookies in self.ensembles:
            if first <= entry_id:
                chosen = bookies
            else:
                break
        return chosen

    def write_set(self, entry_id: int) -> list[str]:
        """The Qw bookies holding entry ``entry_id``: striped from index entry_id mod E."""
        ensemble = self.ensemble_for(entry_id)
        e = len(ensemble)
        return [ensemble[(entry_id + i) % e] for i in range(self.write_quorum_size)]

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def with_state(self, state: LedgerState, **changes) -> "LedgerMetadata":
        check_transition(self.state, state)
        return replace(self, state=state, **changes)

    def with_fragment(self, first_entry_id: int, ensemble: tuple[str, ...]) -> "LedgerMetadata":
        if self.state is LedgerState.CLOSED:
            raise LedgerMetadataError(f"ledger {self.ledger_id} is closed; no new fragment")
        kept = tuple(f for f in self.ensembles if f[0] < first_entry_id)
        return replace(self, ensembles=kept + ((first_entry_id, tuple(ensemble)),))

    def with_ensemble_replaced(self, index: int, ensemble: tuple[str, ...]) -> "LedgerMetadata":
        """Autorecovery: the same fragment (same first entry) held by other bookies. Allowed in any state."""
        first, old = self.ensembles[index]
        if len(ensemble) != len(old):
            raise LedgerMetadataError(f"ledger {self.ledger_id}: fragment {index} must keep {len(old)} bookies")
        ensembles = list(self.ensembles)
        ensembles[index] = (first, tuple(ensemble))
        return replace(self, ensembles=tuple(ensembles))

    def repaired_from(self, ours: "LedgerMetadata") -> bool:
        """True when this (newer) metadata differs from ``ours`` only by autorecovery's work:
        same state, same fragments by first entry, the last fragment untouched. A writer
        adopts such a change instead of treating it as a rival writer."""
        if self.state is not ours.state or len(self.ensembles) != len(ours.ensembles):
            return False
        if [f for f, _ in self.ensembles] != [f for f, _ in ours.ensembles]:
            return False
        return self.ensembles[-1] == ours.ensembles[-1]

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "ledger_id": self.ledger_id,
                "state": self.state.value,
                "ensemble_size": self.ensemble_size,
                "write_quorum_size": self.write_quorum_size,
                "ack_quorum_size": self.ack_quorum_size,
                "last_entry_id": self.last_entry_id,
                "length": self.length,
                "digest_type": self.digest_type,
                "password": self.password.hex(),
                "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
                "ctime_ms": self.ctime_ms,
                "custom": self.custom,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "LedgerMetadata":
        try:
            d = json.loads(data)
            return cls(
                ledger_id=int(d["ledger_id"]),
                state=LedgerState(d["state"]),
                ensemble_size=int(d["ensemble_size"]),
                write_quorum_size=int(d["write_quorum_size"]),
                ack_quorum_size=int(d["ack_quorum_size"]),
                last_entry_id=int(d["last_entry_id"]),
                length=int(d["length"]),
                digest_type=d["digest_type"],
                password=bytes.fromhex(d["password"]),
                ensembles=tuple((int(first), tuple(bookies)) for first, bookies in d["ensembles"]),
                ctime_ms=int(d.get("ctime_ms", 0)),
                custom=dict(d.get("custom", {})),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LedgerMetadataError(f"invalid ledger metadata: {exc}") from exc
