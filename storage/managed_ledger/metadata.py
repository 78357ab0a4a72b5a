"""The documents a managed ledger keeps in the metadata store.

``/managed-ledgers/<name>`` holds the ledger list (id, entries, size,
creation time), ledgers removed from the list but not yet deleted
(``pending_deletion``, so a crash between the two steps is finished on the
next open) and properties. ``/managed-ledgers/<name>/<quoted cursor name>``
holds a cursor's snapshot: its mark-delete position, properties, the ledger
that records its later changes, and (when small) its individually deleted
ranges. Both are JSON, changed only by conditional writes.
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


@dataclass
class CursorState:
    """Everything a durable cursor must restore exactly."""

    mark_delete: Position
    deleted: list[tuple[int, int, int]] = field(default_factory=list)  # (ledger, first entry, last entry) ranges
    batch_deleted: dict[str, list[int]] = field(default_factory=dict)  # "ledger:entry" -> acked batch indexes
    properties: dict[str, int] = field(default_factory=dict)

    def to_doc(self) -> dict:
        return {"mark_delete": list(self.mark_delete), "deleted": [list(r) for r in self.deleted],
                "batch_deleted": self.batch_deleted, "properties": self.properties}

    @classmethod
    def from_doc(cls, doc: dict) -> "CursorState":
        return cls(Position(*doc["mark_delete"]), [tuple(r) for r in doc.get("deleted", [])],
                   {k: list(v) for k, v in doc.get("batch_deleted", {}).items()},
                   {k: int(v) for k, v in doc.get("properties", {}).items()})


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


def positions_to_ranges(positions) -> list[tuple[int, int, int]]:
    """Sorted positions -> (ledger, first, last) runs of consecutive entries."""
    out: list[list[int]] = []
    for ledger_id, entry_id in sorted(positions):
        if out and out[-1][0] == ledger_id and out[-1][2] == entry_id - 1:
            out[-1][2] = entry_id
        else:
            out.append([ledger_id, entry_id, entry_id])
    return [tuple(r) for r in out]


def ranges_to_positions(ranges) -> set[Position]:
    return {Position(l, e) for l, first, last in ranges for e in range(first, last + 1)}
