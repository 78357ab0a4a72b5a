"""A topic's unbounded log as a chain of ledgers, with cursors that remember what each reader has consumed."""

from storage.errors import (
    CursorNotFoundError, InvalidManagedLedgerNameError, ManagedLedgerClosedError, ManagedLedgerConfigError,
    ManagedLedgerError, ManagedLedgerFencedError, ManagedLedgerNotFoundError,
)
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.cursor import ManagedCursor
from storage.managed_ledger.factory import ManagedLedgerFactory
from storage.managed_ledger.ledger import ManagedLedger
from storage.managed_ledger.position import Entry, InitialPosition, Position

__all__ = [
    "CursorNotFoundError", "Entry", "InitialPosition", "InvalidManagedLedgerNameError", "ManagedCursor",
    "ManagedLedger", "ManagedLedgerClosedError", "ManagedLedgerConfig", "ManagedLedgerConfigError",
    "ManagedLedgerError", "ManagedLedgerFactory", "ManagedLedgerFencedError", "ManagedLedgerNotFoundError",
    "Position",
]
