"""Positions and entries of a managed ledger."""

from __future__ import annotations

import enum
from typing import NamedTuple


class Position(NamedTuple):
    """(ledger id, entry id), ordered. ``(L, -1)`` means "before the first entry of ledger L"."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


class Entry(NamedTuple):
    position: Position
    data: bytes


class InitialPosition(enum.Enum):
    LATEST = "latest"
    EARLIEST = "earliest"
