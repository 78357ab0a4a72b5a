"""The ledger client's API: what a user of the ledger store may rely on, apart from how it is done.

BookKeeper splits its client the same way (``client/api`` interfaces,
``client`` implementation). The managed ledger and the broker are written
against these Protocols only; two implementations satisfy them and pass one
contract suite (tests/client/test_api_contract.py):

- ``storage.client.client.LedgerClient``: the real client, bookies over TCP;
- ``storage.client.memory.MemoryLedgerClient``: ledgers in memory, for tests
  of the logic above the ledger store that need no bookies.

The contract, in short. A ledger has one writer (``create_ledger``). An entry
is acknowledged in order; the last add confirmed (LAC) is the highest entry
safe to read. ``open_ledger(recovery=True)`` fences the ledger -- the
writer's next add and its close fail with LedgerFencedError -- and returns a
handle on the closed ledger. ``open_ledger(recovery=False)`` leaves the
writer alone and reads up to a LAC that may lag behind the writer's.
Errors are storage.errors classes: NoSuchLedgerError, UnauthorizedError,
NoSuchEntryError (read past the LAC), LedgerFencedError, LedgerClosedError
(add on a closed handle), ClientClosedError (handle or client closed),
InvalidQuorumError, FrameTooLargeError.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from storage.client.registry import BookieInfo, parse_registration  # the bookie registry, for admin listings
from storage.client.placement import write_sets  # which bookies each entry of an ensemble goes to, for admin views
from storage.digest import Entry

if TYPE_CHECKING:
    from storage.client.config import ClientConfig

__all__ = ["BookieInfo", "Entry", "LedgerClient", "ReadHandle", "WriteHandle", "parse_registration", "write_sets"]


@runtime_checkable
class ReadHandle(Protocol):
    """A ledger opened for reading. Entries come back as ``storage.digest.Entry`` (``entry_id``, ``payload``)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry id safe to read (-1: none yet)."""

    @property
    def is_closed(self) -> bool:
        """Whether the *ledger* is closed (its last entry id is final)."""

    @property
    def length(self) -> int:
        """Bytes of payload up to the last add confirmed (final once closed)."""

    async def read_entries(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` inclusive, in order.

        Raises NoSuchEntryError past the LAC, ValueError for an empty or negative range,
        ClientClosedError once the handle is closed.
        """

    async def read_entry(self, entry_id: int) -> Entry: ...

    async def read_lac(self) -> int:
        """Ask the store for the LAC; returns (and keeps) the highest known."""

    async def close(self) -> None:
        """Release the handle. Idempotent."""


@runtime_checkable
class WriteHandle(ReadHandle, Protocol):
    """The single writer of a ledger; it reads what it wrote too."""

    def add_entry_async(self, payload: bytes) -> asyncio.Future:
        """Start an add; the future resolves with the entry id once acknowledged, in call order.

        It fails with LedgerFencedError (a recovery took the ledger over), LedgerClosedError
        (this handle is closing or closed), FrameTooLargeError, or the error that stopped the writer.
        """

    async def add_entry(self, payload: bytes) -> int: ...

    async def close(self) -> None:
        """Wait for pending adds, then close the ledger at its LAC.

        Raises LedgerFencedError when a recovery took the ledger over, NoSuchLedgerError when it was deleted.
        """


@runtime_checkable
class LedgerClient(Protocol):
    """Creates, opens and deletes ledgers."""

    @classmethod
    async def open(cls, metadata_store, config: "ClientConfig | None" = None, **options) -> "LedgerClient":
        """The ledger store's own client, on bookies over TCP (``storage.client.client.LedgerClient``).

        As with BookKeeper's ``BookKeeper.newBuilder``, this is the one place the API names an
        implementation, so that its users never import one.
        """
        from storage.client.client import LedgerClient as TcpLedgerClient

        return await TcpLedgerClient.open(metadata_store, config, **options)

    async def create_ledger(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                            password: bytes = b"", custom: dict | None = None,
                            min_zones: int | None = None) -> WriteHandle:
        """A new ledger and its writer. Raises InvalidQuorumError unless E >= Qw >= Qa >= 1.

        ``min_zones``: every write set spans at least min(min_zones, Qw) zones, for this ledger's life
        (PlacementPolicyError when the bookies cannot), whatever the client's own zone rule."""

    async def check_placement(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                              min_zones: int | None = None) -> None:
        """Raise what ``create_ledger`` would for placement (InvalidQuorumError, NotEnoughBookiesError,
        PlacementPolicyError) against the bookies there are now, creating nothing."""

    async def open_ledger(self, ledger_id: int, *, recovery: bool = True, password: bytes = b"") -> ReadHandle:
        """Open for reading; ``recovery=True`` fences and closes the ledger first.

        Raises NoSuchLedgerError, UnauthorizedError (wrong password).
        """

    async def delete_ledger(self, ledger_id: int) -> None:
        """Raises NoSuchLedgerError."""

    async def list_ledgers(self) -> list[int]:
        """Ids of every ledger, ascending."""

    @property
    def bulk_add_paced_s(self) -> float:
        """Seconds this client's large adds have waited for their pace so far (storage/client/pacing.py)."""

    async def close(self) -> None:
        """Stop every writer and handle; later calls raise ClientClosedError. Idempotent."""
