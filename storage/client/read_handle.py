"""ReadHandle: reading a ledger up to what is safe to read, and tailing an open one.

What is safe to read is bounded by the last add confirmed (LAC): an entry at
or below it reached Qa bookies and every earlier entry did too, so any reader
sees the same prefix. A closed ledger's bound is its final ``last_entry_id``.
A handle opened without recovery on a ledger that is still being written
learns the LAC from the bookies (``read_lac``: the writer piggybacks its LAC
on every entry) and follows metadata changes (new fragments after an
ensemble change, the final close) through a data watch on the ledger node.
"""

from __future__ import annotations

import asyncio
import logging

from storage.client.backoff import Backoff
from storage.client.context import ClientContext
from storage.client.read_ops import ReadEntries, read_lac
from storage.digest import Entry
from storage.errors import ClientClosedError, MetadataError, NoNodeError, NoSuchEntryError, ReadEntryError
from storage.ledger_metadata import LedgerMetadata
from storage.metadata import Watch, paths

log = logging.getLogger(__name__)


class ReadHandle:
    """A ledger opened for reading. Obtain one from ``LedgerClient.open_ledger``."""

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, version: int, *, last_add_confirmed: int):
        self._ctx = ctx
        self._metadata = metadata
        self._version = version
        self._lac = metadata.last_entry_id if metadata.is_closed else last_add_confirmed
        self._watch: Watch | None = None
        self._refresh_task: asyncio.Task | None = None
        self._handle_closed = False

    # ---- properties --------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._metadata.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    @property
    def version(self) -> int:
        """Version of the ledger node that ``metadata`` was read from (or written as)."""
        return self._version

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry id that is safe to read (-1: none yet)."""
        return self._lac

    @property
    def is_closed(self) -> bool:
        """Whether the *ledger* is closed (its last entry id is final)."""
        return self._metadata.is_closed

    @property
    def length(self) -> int:
        """Ledger length in bytes (final once closed)."""
        return self._metadata.length

    # ---- reads -------------------------------------------------------------

    async def read_entries(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` inclusive, in order, as ``storage.digest.Entry``.

        Raises NoSuchEntryError when ``last`` is beyond the last add confirmed,
        ReadEntryError (retriable) when an entry could be read from no replica,
        UnauthorizedError on a wrong password, ValueError for an empty range.
        """
        self._check_open()
        if first < 0 or last < first:
            raise ValueError(f"invalid entry range {first}..{last}")
        if last > self._lac:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed {self._lac}"
            )
        md = self._metadata
        try:
            entries = await ReadEntries(self._ctx, md, first, last).run()
        except ReadEntryError:
            # Our view of the ensembles may be stale (a fragment we do not
            # know about yet, or one autorecovery moved to other bookies --
            # closed ledgers too); one fresh look before giving up.
            if not await self._refresh_metadata() or self._metadata.ensembles == md.ensembles:
                raise
            entries = await ReadEntries(self._ctx, self._metadata, first, last).run()
        self._advance_lac(entries[-1].lac)
        return entries

    async def read_entry(self, entry_id: int) -> Entry:
        return (await self.read_entries(entry_id, entry_id))[0]

    def _advance_lac(self, lac: int) -> None:
        if lac > self._lac and not self._metadata.is_closed:
            self._lac = lac

    # ---- LAC and tailing ---------------------------------------------------

    async def read_lac(self) -> int:
        """Ask the bookies for the LAC; returns (and keeps) the highest known. Raises ReadEntryError."""
        self._check_open()
        if self._metadata.is_closed:
            return self._lac
        self._advance_lac(await read_lac(self._ctx, self._metadata))
        return self._lac

    async def wait_for_lac(self, entry_id: int, timeout_s: float) -> int:
        """Poll the LAC (with backoff) until it reaches ``entry_id`` or the ledger is closed.

        Returns the LAC then; a closed ledger's LAC may stay below ``entry_id``
        (the ledger will never hold it). Raises TimeoutError at the deadline.
        """
        ctx = self._ctx
        backoff = Backoff(ctx.config, ctx.rng)
        deadline = ctx.clock() + timeout_s
        while True:
            if self._lac >= entry_id or self._metadata.is_closed:
                return self._lac
            try:
                await self.read_lac()
            except ReadEntryError as exc:
                log.debug("read_lac for ledger %d failed while tailing: %s", self.ledger_id, exc)
            if self._lac >= entry_id or self._metadata.is_closed:
                return self._lac
            remaining = deadline - ctx.clock()
            if remaining <= 0:
                raise TimeoutError(
                    f"ledger {self.ledger_id}: LAC {self._lac} did not reach {entry_id} within {timeout_s:g}s"
                )
            await asyncio.sleep(min(backoff.next_delay(), remaining))

    # ---- metadata ----------------------------------------------------------

    def _watch_metadata(self) -> None:
        """Follow the ledger node (new fragments, close) while the ledger is open."""
        if self._watch is None and not self._metadata.is_closed:
            self._watch = self._ctx.store.watch_data(paths.ledger_path(self.ledger_id), self._on_metadata_event)

    def _on_metadata_event(self, _event) -> None:
        if self._handle_closed:
            return
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> bool:
        """Re-read the ledger node; True if it changed our view."""
        try:
            data, stat = await self._ctx.store.get(paths.ledger_path(self.ledger_id))
        except NoNodeError:
            return False  # deleted: keep serving what we know; reads will fail on their own
        except MetadataError as exc:
            log.warning("ledger %d: metadata refresh failed: %s", self.ledger_id, exc)
            return False
        if stat.version <= self._version:
            return False
        self._apply_metadata(LedgerMetadata.from_bytes(data), stat.version)
        return True

    def _apply_metadata(self, metadata: LedgerMetadata, version: int) -> None:
        self._metadata = metadata
        self._version = version
        if metadata.is_closed:
            self._lac = metadata.last_entry_id
            if self._watch is not None:
                self._watch.cancel()
                self._watch = None

    def _check_open(self) -> None:
        if self._handle_closed:
            raise ClientClosedError(f"handle for ledger {self.ledger_id} is closed")

    async def close(self) -> None:
        """Release the handle (stop following metadata). Idempotent."""
        self._handle_closed = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._refresh_task is not None and not self._refresh_task.done():
            self._refresh_task.cancel()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ledger={self.ledger_id}, lac={self._lac}, state={self._metadata.state.value})"
