"""The documents a managed ledger keeps in the metadata store.

``/managed-ledgers/<name>`` holds the ledger list (id, entries, size,
creation time), ledgers removed from the list but not yet deleted
(``pending_deletion``, so a crash between the two steps is finished on the
next open) and properties. ``/managed-ledgers/<name>/<quoted cursor name>``
holds a cursor's snapshot: its mark-delete position, properties, the ledger
that records its later changes, and (when small) its individually deleted
ranges and batch-index acks (see cursor_state.py). Both are JSON, changed
only by conditional writes.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import asdict, dataclass, field

from storage.errors import InvalidManagedLedgerNameError

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
