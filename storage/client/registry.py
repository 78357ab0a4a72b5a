"""The client's view of the bookies: registrations under /ledgers/available (and .../readonly).

Each bookie registers an ephemeral node whose data is JSON::

    {"bookie_id": ..., "address": "host:port", "http_address": ...,
     "network_location": "/zone/upgradeDomain", "state": "writable"}

under ``/ledgers/available/<id>`` when writable, ``/ledgers/available/readonly/<id>``
when read-only. ``BookieRegistry`` keeps children watches on both, and on any
change re-reads every registration (bookie counts are small; re-reading all
data is simpler than tracking per-node versions and immune to coalesced
events). Refreshes are coalesced: at most one runs, and one more follows if
something changed meanwhile.

A bookie that is no longer registered (dead, or partitioned from the
metadata store) may still hold entries, so ``address()`` falls back to
parsing ``host:port`` from the bookie id -- the default id format.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from storage.client.placement import BookieInfo
from storage.errors import MetadataError, NoNodeError
from storage.metadata import MetadataStore, Watch, join, paths
from storage.network_location import DEFAULT_NETWORK_LOCATION

log = logging.getLogger(__name__)

_READONLY_CHILD = paths.READONLY.rsplit("/", 1)[1]


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port). Raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def parse_registration(bookie_id: str, data: bytes, writable: bool) -> BookieInfo:
    """A BookieInfo from a registration node's data; tolerant of missing fields."""
    try:
        doc = json.loads(data) if data else {}
        if not isinstance(doc, dict):
            doc = {}
    except ValueError:
        doc = {}
    address = doc.get("address") or bookie_id
    state = doc.get("state")
    return BookieInfo(
        bookie_id=bookie_id,
        address=str(address),
        network_location=str(doc.get("network_location") or DEFAULT_NETWORK_LOCATION),
        writable=writable and state in (None, "writable"),
        http_address=doc.get("http_address"),
    )


class BookieRegistry:
    def __init__(self, store: MetadataStore):
        self._store = store
        self._bookies: dict[str, BookieInfo] = {}
        self._watches: list[Watch] = []
        self._refreshing: asyncio.Task | None = None
        self._dirty = False
        self._changed = asyncio.Event()
        self._closed = False
        self._listeners: list[Callable[[set[str]], None]] = []
        self.generation = 0  # bumps on every completed refresh

    async def start(self) -> "BookieRegistry":
        await self._store.ensure_path(paths.AVAILABLE)
        await self._store.ensure_path(paths.READONLY)
        self._watches.append(self._store.watch_children(paths.AVAILABLE, self._on_event))
        self._watches.append(self._store.watch_children(paths.READONLY, self._on_event))
        await self.refresh()
        return self

    # ---- view --------------------------------------------------------------

    def bookies(self) -> list[BookieInfo]:
        """Every registered bookie, writable and read-only."""
        return list(self._bookies.values())

    def writable(self) -> list[BookieInfo]:
        return [b for b in self._bookies.values() if b.writable]

    def get(self, bookie_id: str) -> BookieInfo | None:
        return self._bookies.get(bookie_id)

    def is_registered(self, bookie_id: str) -> bool:
        return bookie_id in self._bookies

    def address(self, bookie_id: str) -> tuple[str, int]:
        """Where to dial a bookie: its registered address, else parsed from its id. Raises ValueError."""
        info = self._bookies.get(bookie_id)
        if info is not None:
            try:
                return parse_address(info.address)
            except ValueError:
                pass
        return parse_address(bookie_id)

    # ---- refresh -----------------------------------------------------------

    def _on_event(self, _event) -> None:
        if self._closed:
            return
        self._dirty = True
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while self._dirty and not self._closed:
            self._dirty = False
            try:
                await self.refresh()
            except MetadataError as exc:
                # The next watch event (or session re-connect) triggers another try.
                log.warning("bookie registry refresh failed: %s", exc)
                return

    async def refresh(self) -> None:
        """Re-read every registration now."""
        writable_ids = [c for c in await self._children(paths.AVAILABLE) if c != _READONLY_CHILD]
        readonly_ids = await self._children(paths.READONLY)
        reads = [self._read(join(paths.AVAILABLE, b), b, True) for b in writable_ids]
        reads += [self._read(join(paths.READONLY, b), b, False) for b in readonly_ids]
        found: dict[str, BookieInfo] = {}
        for info in await asyncio.gather(*reads):
            if info is None:
                continue
            # Registered in both places mid-transition: trust the read-only one.
            if info.bookie_id in found and not info.writable:
                found[info.bookie_id] = info
            else:
                found.setdefault(info.bookie_id, info)
        self._bookies = found
        self.generation += 1
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in list(self._listeners):
            try:
                listener(set(found))
            except Exception:  # a listener's bug must not stop the registry
                log.exception("bookie registry listener failed")

    def add_listener(self, listener: Callable[[set[str]], None]) -> None:
        """Call ``listener(registered bookie ids)`` after every refresh (on the loop; must not block)."""
        self._listeners.append(listener)

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []

    async def _read(self, path: str, bookie_id: str, writable: bool) -> BookieInfo | None:
        try:
            data, _ = await self._store.get(path)
        except NoNodeError:
            return None  # unregistered between listing and reading
        return parse_registration(bookie_id, data, writable)

    async def wait_for(self, predicate: Callable[["BookieRegistry"], bool], timeout_s: float) -> None:
        """Wait until ``predicate(self)`` holds after some refresh. Raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"bookie registry did not reach the expected state within {timeout_s:g}s")
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                # A missed or coalesced watch: re-read rather than trust the cache.
                await self.refresh()

    async def close(self) -> None:
        self._closed = True
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            try:
                await self._refreshing
            except (asyncio.CancelledError, MetadataError):
                pass
