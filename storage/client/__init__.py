"""Ledger client: create/add/read/recover/close/delete ledgers striped over zone-aware bookie ensembles.

Public API::

    client = await LedgerClient.open(store_or_url, ClientConfig(...))
    writer = await client.create_ledger(3, 2, 2, password=b"pw")   # -> LedgerHandle
    entry_id = await writer.add_entry(b"payload")                  # or writer.add_entry_async(...)
    await writer.close()
    reader = await client.open_ledger(ledger_id, password=b"pw")   # -> ReadHandle (after recovery)
    entries = await reader.read_entries(0, reader.last_add_confirmed)
"""

from storage.client.client import LedgerClient
from storage.client.config import ClientConfig, PlacementPolicy
from storage.client.context import BadReplica, ClientContext, ClientStats
from storage.client.faults import FaultPlan
from storage.client.ledger_handle import LedgerHandle
from storage.client.placement import BookieInfo, Placement
from storage.client.read_handle import ReadHandle

__all__ = [
    "BadReplica",
    "BookieInfo",
    "ClientConfig",
    "ClientContext",
    "ClientStats",
    "FaultPlan",
    "LedgerClient",
    "LedgerHandle",
    "Placement",
    "PlacementPolicy",
    "ReadHandle",
]
