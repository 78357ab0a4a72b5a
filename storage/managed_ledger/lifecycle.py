"""The lifecycles of a managed ledger and of a cursor, as transition tables.

Managed ledger::

    OPENING --open done--> OPEN --another owner wrote the list--> FENCED
       |                     |                                       |
       +---- fenced ---------+------------- close -------------------+--> CLOSED --delete--> DELETED

- OPENING: reading the list, recovering the last ledger, creating a new one.
  A version conflict here fences it too (another owner opened it meanwhile).
- FENCED: another owner took over; adds, metadata writes and cursor writes
  fail with ManagedLedgerFencedError. Only ``close`` leaves it.
- CLOSED and DELETED are final for this object (a fence arriving after the
  close, e.g. from a cursor write the close waited for, leaves it CLOSED).

Cursor: OPEN --close--> CLOSED --delete_persisted--> DELETED.

Only ManagedLedger (ledger.py) and ManagedCursor (cursor.py) change these
states, through ``Lifecycle.to``; an illegal transition raises
ManagedLedgerStateError, because it is a bug, never an input.
"""

from __future__ import annotations

import enum
from typing import Generic, TypeVar

from storage.errors import ManagedLedgerStateError


class ManagedLedgerState(enum.Enum):
    OPENING = "opening"
    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"
    DELETED = "deleted"


class ManagedCursorState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    DELETED = "deleted"


_L = ManagedLedgerState
_C = ManagedCursorState

MANAGED_LEDGER_TRANSITIONS: dict[ManagedLedgerState, frozenset[ManagedLedgerState]] = {
    _L.OPENING: frozenset({_L.OPEN, _L.FENCED, _L.CLOSED}),
    _L.OPEN: frozenset({_L.FENCED, _L.CLOSED}),
    _L.FENCED: frozenset({_L.CLOSED}),
    _L.CLOSED: frozenset({_L.DELETED}),
    _L.DELETED: frozenset(),
}

CURSOR_TRANSITIONS: dict[ManagedCursorState, frozenset[ManagedCursorState]] = {
    _C.OPEN: frozenset({_C.CLOSED}),
    _C.CLOSED: frozenset({_C.DELETED}),
    _C.DELETED: frozenset(),
}

S = TypeVar("S", bound=enum.Enum)


class Lifecycle(Generic[S]):
    """The current state of one object and the table of where it may go from there."""

    __slots__ = ("state", "_table", "_what")

    def __init__(self, initial: S, table: dict[S, frozenset[S]], what: str):
        self.state = initial
        self._table = table
        self._what = what

    def can(self, new: S) -> bool:
        return new in self._table[self.state]

    def to(self, new: S) -> None:
        """Move to ``new``; raises ManagedLedgerStateError unless the table allows it."""
        if new not in self._table[self.state]:
            raise ManagedLedgerStateError(f"{self._what}: illegal transition {self.state.value} -> {new.value}")
        self.state = new

    def __repr__(self) -> str:
        return f"Lifecycle({self._what}: {self.state.value})"


def managed_ledger_lifecycle(name: str) -> Lifecycle[ManagedLedgerState]:
    return Lifecycle(ManagedLedgerState.OPENING, MANAGED_LEDGER_TRANSITIONS, f"managed ledger {name}")


def cursor_lifecycle(what: str) -> Lifecycle[ManagedCursorState]:
    return Lifecycle(ManagedCursorState.OPEN, CURSOR_TRANSITIONS, what)
