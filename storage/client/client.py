"""LedgerClient: the BookKeeper client -- create, open (with or without recovery), delete and list ledgers.

Ledger ids are unique across clients: each comes from a sequential node
created (then deleted) under ``/ledgers/idgen``, whose counter the metadata
store keeps per parent, exactly as BookKeeper's ZooKeeper id generator does.
Metadata lives at ``paths.ledger_path(id)`` (the hierarchical layout); it is
created before any entry is written, because bookies refuse adds to ledgers
whose metadata node does not exist.
"""

from __future__ import annotations

import logging
import random
import time
import weakref

from storage.client.config import ClientConfig
from storage.client.connection import BookiePool
from storage.client.context import ClientContext
from storage.client.faults import FaultPlan
from storage.client.ledger_handle import LedgerHandle
from storage.client.placement import new_ensemble
from storage.client.read_handle import ReadHandle
from storage.client.read_ops import read_lac
from storage.client.recovery import LedgerRecovery
from storage.client.registry import BookieRegistry
from storage.errors import (
    ClientClosedError,
    NodeExistsError,
    NoNodeError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PlacementPolicyError,
    ReadEntryError,
    WrongLedgerPasswordError,
)
from storage.ledger_metadata import LedgerMetadata, validate_quorum
from storage.metadata import MetadataStore, join, open_store, paths
from storage.tls import client_context

log = logging.getLogger(__name__)

_ID_PREFIX = "ID-"


class LedgerClient:
    """Entry point of the ledger client. Use ``await LedgerClient.open(store)``; close with ``await client.close()``."""

    def __init__(self, ctx: ClientContext, *, owns_store: bool = False):
        self._ctx = ctx
        self._owns_store = owns_store
        self._closed = False
        self._handles: weakref.WeakSet[ReadHandle] = weakref.WeakSet()  # closed with the client
        # A writer replaces a bookie that leaves its current ensemble at once, not on its next
        # failed add: an idle ledger would otherwise keep a lost bookie until autorecovery fences it.
        ctx.registry.add_listener(self._bookies_changed)

    @classmethod
    async def open(
        cls,
        metadata_store: MetadataStore | str,
        config: ClientConfig | None = None,
        *,
        rng: random.Random | None = None,
        faults: FaultPlan | None = None,
        clock=time.monotonic,
    ) -> "LedgerClient":
        """Start a client on an open metadata store (or a URL, which the client then owns and closes).

        ``rng`` drives placement and backoff jitter; ``faults`` is the
        scripted-fault seam for tests (see storage.client.faults).
        Raises ValueError for a bad config or unreadable TLS files.
        """
        config = (config or ClientConfig()).validate()
        tls = (client_context(config.tls_trust_certs_file_path, config.tls_certificate_file_path,
                              config.tls_key_file_path) if config.tls_trust_certs_file_path else None)
        owns = isinstance(metadata_store, str)
        store = await open_store(metadata_store) if owns else metadata_store
        registry = await BookieRegistry(store).start()
        pool = BookiePool(config, registry.address, faults, tls)
        ctx = ClientContext(config, store, registry, pool, rng or random.Random(), clock)
        return cls(ctx, owns_store=owns)

    @property
    def context(self) -> ClientContext:
        return self._ctx

    @property
    def bulk_add_paced_s(self) -> float:
        return self._ctx.pool.pacer.paced_s

    @property
    def registry(self) -> BookieRegistry:
        return self._ctx.registry

    @property
    def stats(self):
        return self._ctx.stats

    # ---- create ------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        password: bytes = b"",
        custom: dict | None = None,
        min_zones: int | None = None,
    ) -> LedgerHandle:
        """Create a ledger on a zone-aware ensemble and return its writer.

        ``min_zones`` overrides the client's zone rule for this ledger (its
        ensemble and every later ensemble change): each write set must span
        ``min(min_zones, Qw)`` zones, strictly.

        Raises InvalidQuorumError (unless E >= Qw >= Qa >= 1),
        NotEnoughBookiesError, PlacementPolicyError (strict placement, or
        ``min_zones`` not met), MetadataError from the store.
        """
        self._check_open()
        validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)
        ctx = self._ctx
        policy = ctx.config.placement if min_zones is None else ctx.config.placement.requiring_zones(min_zones)
        placement = await self._place(ensemble_size, write_quorum_size, ack_quorum_size, policy)
        ctx.stats.record_placement_warnings(placement.warnings)
        while True:
            ledger_id = await self._next_ledger_id()
            md = LedgerMetadata(
                ledger_id=ledger_id,
                ensemble_size=ensemble_size,
                write_quorum_size=write_quorum_size,
                ack_quorum_size=ack_quorum_size,
                password=bytes(password),
                ensembles=((0, placement.ensemble),),
                ctime_ms=int(time.time() * 1000),
                custom=dict(custom or {}),
            )
            try:
                await ctx.store.create(paths.ledger_path(ledger_id), md.to_bytes(), make_parents=True)
            except NodeExistsError:
                # Only possible if the id counter was reset under existing ledgers: take another id.
                log.warning("ledger id %d already has metadata; taking another id", ledger_id)
                continue
            handle = LedgerHandle(ctx, md, 0, placement=policy)
            self._handles.add(handle)
            return handle

    async def check_placement(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                              min_zones: int | None = None) -> None:
        """Raise what ``create_ledger`` with these arguments would raise for placement (InvalidQuorumError,
        NotEnoughBookiesError, PlacementPolicyError) against the bookies registered now; create nothing."""
        self._check_open()
        validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)
        policy = self._ctx.config.placement
        await self._place(ensemble_size, write_quorum_size, ack_quorum_size,
                          policy if min_zones is None else policy.requiring_zones(min_zones))

    async def _place(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int, policy):
        ctx = self._ctx
        for refreshed in (False, True):
            try:
                return new_ensemble(ctx.registry.bookies(), ensemble_size, write_quorum_size, ack_quorum_size,
                                    policy=policy, rng=ctx.rng)
            except (NotEnoughBookiesError, PlacementPolicyError):
                if refreshed:
                    raise
                await ctx.registry.refresh()  # the watch may lag behind a bookie that just registered
        raise AssertionError("unreachable")

    async def _next_ledger_id(self) -> int:
        store = self._ctx.store
        path = await store.create(join(paths.IDGEN, _ID_PREFIX), b"", sequential=True, make_parents=True)
        try:
            await store.delete(path)
        except NoNodeError:
            pass
        return int(path.rsplit(_ID_PREFIX, 1)[1])

    # ---- open --------------------------------------------------------------

    async def get_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """(metadata, node version). Raises NoSuchLedgerError."""
        self._check_open()
        try:
            data, stat = await self._ctx.store.get(paths.ledger_path(ledger_id))
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc
        return LedgerMetadata.from_bytes(data), stat.version

    async def open_ledger(self, ledger_id: int, *, recovery: bool = True, password: bytes = b"") -> ReadHandle:
        """Open a ledger for reading.

        ``recovery=True`` (the default) fences the ledger and closes it at the
        last entry that may have been acknowledged: the previous writer's next
        add fails with LedgerFencedError, and the handle reads a final ledger.
        ``recovery=False`` leaves the writer alone; the handle reads up to the
        LAC and can tail (``read_lac``, ``wait_for_lac``) while it grows.

        Raises NoSuchLedgerError, WrongLedgerPasswordError (an UnauthorizedError: wrong password),
        LedgerRecoveryError (retriable: too few bookies answered).
        """
        self._check_open()
        md, version = await self.get_metadata(ledger_id)
        if md.password != bytes(password):
            raise WrongLedgerPasswordError(f"wrong password for ledger {ledger_id}")
        if recovery:
            md, version = await LedgerRecovery(self._ctx, ledger_id).run()
            handle = ReadHandle(self._ctx, md, version, last_add_confirmed=md.last_entry_id)
            self._handles.add(handle)
            return handle
        lac = md.last_entry_id
        if not md.is_closed:
            try:
                lac = await read_lac(self._ctx, md)
            except ReadEntryError as exc:
                log.info("ledger %d: no bookie answered READ_LAC on open: %s", ledger_id, exc)
                lac = -1
        handle = ReadHandle(self._ctx, md, version, last_add_confirmed=lac)
        self._handles.add(handle)
        handle._watch_metadata()
        # A change between our read and the watch would go unseen: look once more.
        await handle._refresh_metadata()
        return handle

    # ---- delete / list -----------------------------------------------------

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger's metadata; bookies garbage-collect its entries. Raises NoSuchLedgerError."""
        self._check_open()
        try:
            await self._ctx.store.delete(paths.ledger_path(ledger_id))
        except NoNodeError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc

    async def list_ledgers(self) -> list[int]:
        """Ids of every ledger with metadata, ascending."""
        self._check_open()
        store = self._ctx.store
        out: list[int] = []
        for top in await _children(store, paths.LEDGERS_ROOT):
            if top in paths.RESERVED or not (len(top) == 2 and top.isdigit()):
                continue
            top_path = join(paths.LEDGERS_ROOT, top)
            for mid in await _children(store, top_path):
                mid_path = join(top_path, mid)
                for leaf in await _children(store, mid_path):
                    try:
                        out.append(paths.ledger_id_from_path(join(mid_path, leaf)))
                    except ValueError:
                        continue
        return sorted(out)

    def _bookies_changed(self, registered: set[str]) -> None:
        if self._closed:
            return
        for handle in list(self._handles):
            if isinstance(handle, LedgerHandle):
                handle._bookies_changed(registered)

    # ---- lifecycle ---------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the ledger client is closed")

    async def close(self) -> None:
        """Close bookie connections and the registry (and the store, if the client opened it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Stop writers first: with the pool closed their adds would fail, and an
        # ensemble change must not rewrite ledger metadata on the way out.
        for handle in list(self._handles):
            if isinstance(handle, LedgerHandle):
                handle._abort(ClientClosedError(f"ledger client closed while ledger {handle.ledger_id} was open"))
            await ReadHandle.close(handle)
        await self._ctx.registry.close()
        await self._ctx.pool.close()
        if self._owns_store:
            await self._ctx.store.close()

    async def __aenter__(self) -> "LedgerClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return await store.children(path)
    except NoNodeError:
        return []
