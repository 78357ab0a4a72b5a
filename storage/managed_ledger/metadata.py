"""The documents a managed ledger keeps in the metadata store.

``/managed-ledgers/<name>`` holds the ledger list (id, entries, size,
creation time), ledgers removed from the list but not yet deleted
(``pending_deletion``, so a crash between the two steps is finished on the
next open) and properties. ``/managed-ledgers/<name>/<quoted cursor name>``
holds a cursor's snapshot: its mark-delete position, properties, the ledger
that records its later changes, and (when small) its individually deleted
ranges and batch-index acks (see cursor_state.py). Both are JSON, changed
only by conditional writes.

``ManagedLedgerInfo`` also answers every question about positions in the log
(the first entry, the one after or before a position, how many lie between
two): pure functions of the ledger list, so they are tested from tables.
Only ManagedLedger changes the list it holds (open, rollover, trimming).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import asdict, dataclass, field

from storage.errors import InvalidManagedLedgerNameError
from storage.managed_ledger.position import Position

ROOT = "/managed-ledgers"


@dataclass
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp: float = 0.0  # creation time (clock seconds)


@dataclass
class ManagedLedgerInfo:
    ledgers: list[LedgerInfo] = field(default_factory=list)
    pending_deletion: list[int] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    terminated: bool = False

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "ManagedLedgerInfo":
        if not data:
            return cls()
        doc = json.loads(data)
        return cls(
            ledgers=[LedgerInfo(**l) for l in doc.get("ledgers", [])],
            pending_deletion=list(doc.get("pending_deletion", [])),
            properties=dict(doc.get("properties", {})),
            terminated=bool(doc.get("terminated", False)),
        )

    # ---- positions -----------------------------------------------------------
    # A position ``(L, -1)`` means "before the first entry of ledger L". The list is never empty once the
    # managed ledger is open: its last ledger is the one being written.

    def ledger_entries(self, ledger_id: int) -> int:
        """Entries of ledger ``ledger_id`` (0 when it is not in the list)."""
        for info in self.ledgers:
            if info.ledger_id == ledger_id:
                return info.entries
        return 0

    def last_confirmed(self) -> Position:
        """The last entry of the log, or ``(first ledger, -1)`` when it has none."""
        for info in reversed(self.ledgers):
            if info.entries > 0:
                return Position(info.ledger_id, info.entries - 1)
        first = self.ledgers[0].ledger_id if self.ledgers else -1
        return Position(first, -1)

    def normalize(self, position: Position) -> Position:
        """The first existing entry at or after ``position``, else the position the next add will take."""
        for info in self.ledgers:
            if info.ledger_id > position.ledger_id and info.entries > 0:
                return Position(info.ledger_id, 0)
            if info.ledger_id == position.ledger_id and max(position.entry_id, 0) < info.entries:
                return Position(info.ledger_id, max(position.entry_id, 0))
        return self.next_position

    @property
    def next_position(self) -> Position:
        """Where the next entry will be (the end of the log)."""
        last = self.ledgers[-1]
        return Position(last.ledger_id, last.entries)

    @property
    def first_position(self) -> Position:
        return self.normalize(Position(-1, 0))

    def position_after(self, position: Position) -> Position:
        return self.normalize(Position(position.ledger_id, position.entry_id + 1))

    def position_before(self, position: Position) -> Position:
        """The entry just before ``position`` (``(L, -1)`` of the first ledger when there is none)."""
        previous = None
        for info in self.ledgers:
            if info.ledger_id == position.ledger_id and position.entry_id > 0:
                return Position(info.ledger_id, min(position.entry_id, info.entries) - 1)
            if info.ledger_id >= position.ledger_id:
                break
            if info.entries > 0:
                previous = Position(info.ledger_id, info.entries - 1)
        return previous or Position(self.ledgers[0].ledger_id, -1)

    def entries_between(self, after: Position, upto: Position) -> int:
        """How many entries lie in (after, upto]."""
        count = 0
        for info in self.ledgers:
            lo = 0 if info.ledger_id > after.ledger_id else (after.entry_id + 1 if info.ledger_id == after.ledger_id else info.entries)
            hi = info.entries - 1 if info.ledger_id < upto.ledger_id else (upto.entry_id if info.ledger_id == upto.ledger_id else -1)
            if hi >= lo:
                count += hi - lo + 1
        return count

    def position_at_index(self, index: int) -> Position | None:
        """The ``index``-th existing entry (0 = the first), or None past the end."""
        for info in self.ledgers:
            if index < info.entries:
                return Position(info.ledger_id, index)
            index -= info.entries
        return None

    @property
    def number_of_entries(self) -> int:
        return sum(info.entries for info in self.ledgers)

    @property
    def total_size(self) -> int:
        return sum(info.size for info in self.ledgers)


def ledger_path(name: str) -> str:
    check_name(name)
    return f"{ROOT}/{name}"


def cursor_path(name: str, cursor: str) -> str:
    return f"{ledger_path(name)}/{quote_cursor(cursor)}"


def quote_cursor(cursor: str) -> str:
    if not isinstance(cursor, str) or not cursor:
        raise InvalidManagedLedgerNameError(f"invalid cursor name {cursor!r}: it must be a non-empty string")
    return urllib.parse.quote(cursor, safe="")


def unquote_cursor(node: str) -> str:
    return urllib.parse.unquote(node)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith("/") or name.endswith("/") or "//" in name:
        raise InvalidManagedLedgerNameError(f"invalid managed ledger name {name!r}: non-empty, no leading, trailing or double '/'")
    if any(part in (".", "..") for part in name.split("/")):
        raise InvalidManagedLedgerNameError(f"invalid managed ledger name {name!r}: '.' and '..' are not allowed")
    return name
