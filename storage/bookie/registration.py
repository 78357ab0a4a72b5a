"""A bookie's registration: the ephemeral node clients discover it by.

Writable bookies live at ``/ledgers/available/<id>``, read-only ones at
``/ledgers/available/readonly/<id>``; the data is JSON with the address,
HTTP address, network location and state. The node is ephemeral, so a dead
bookie vanishes when its session expires. When the session is lost the
bookie re-registers on the new one.

A bookie restarted quickly after ``kill -9`` may find its old node still
there, owned by the dead session that has not timed out yet. The cookie
check and the core's directory lock have already proved that this process
is the bookie, so the stale node is deleted and re-created rather than
waiting out the old session.
"""

from __future__ import annotations

import asyncio
import json
import logging

from storage.bookie.config import BookieConfig
from storage.errors import MetadataError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore, SessionState, paths

log = logging.getLogger(__name__)


class Registration:
    def __init__(self, store: MetadataStore, config: BookieConfig, http_port: int):
        self._store = store
        self._config = config
        self._http_port = http_port
        self.read_only = False
        self._registered = False
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Task] = set()
        store.add_session_listener(self._on_session)

    def describe(self) -> dict:
        c = self._config
        return {
            "bookie_id": c.bookie_id,
            "address": f"{c.advertised_address}:{c.advertised_port or c.port}",
            "http_address": f"{c.advertised_address}:{self._http_port}",
            "network_location": c.network_location,
            "state": "readonly" if self.read_only else "writable",
        }

    async def register(self, read_only: bool = False) -> None:
        """(Re-)create the node for the given mode and remove the other one."""
        async with self._lock:
            await self._register_locked(read_only)

    async def _register_locked(self, read_only: bool) -> None:
        self.read_only = read_only
        bookie_id = self._config.bookie_id
        here = paths.readonly_path(bookie_id) if read_only else paths.available_path(bookie_id)
        other = paths.available_path(bookie_id) if read_only else paths.readonly_path(bookie_id)
        await self._store.ensure_path(paths.READONLY)  # and /ledgers/available above it
        data = json.dumps(self.describe(), sort_keys=True).encode()
        # New node before removing the old one: a client listing both may
        # briefly see the bookie twice, never not at all.
        await self._create_owned(here, data)
        await self._delete_own(other)
        self._registered = True
        log.info("bookie %s registered as %s", bookie_id, "read-only" if read_only else "writable")

    async def _create_owned(self, path: str, data: bytes) -> None:
        try:
            await self._store.create(path, data, ephemeral=True)
            return
        except NodeExistsError:
            pass
        stat = await self._store.exists(path)
        if stat is not None and stat.ephemeral_owner == self._store.session_id:
            await self._store.set(path, data, stat.version)
            return
        log.warning("replacing stale registration %s left by an earlier session", path)
        try:
            await self._store.delete(path)
        except NoNodeError:
            pass
        await self._store.create(path, data, ephemeral=True)

    async def _delete_own(self, path: str) -> None:
        stat = await self._store.exists(path)
        if stat is not None and stat.ephemeral_owner == self._store.session_id:
            try:
                await self._store.delete(path, stat.version)
            except (NoNodeError, MetadataError):
                pass

    async def unregister(self) -> None:
        """Remove this bookie's node; a re-registration already under way finishes first and is not repeated."""
        self._registered = False
        await asyncio.gather(*self._pending, return_exceptions=True)
        async with self._lock:
            for path in (paths.available_path(self._config.bookie_id), paths.readonly_path(self._config.bookie_id)):
                await self._delete_own(path)

    def _on_session(self, state: SessionState) -> None:
        # CONNECTED follows both a resumed session (the node is still ours:
        # _create_owned just rewrites it) and a new one after LOST (the node
        # is gone). Each CONNECTED triggers one attempt; an attempt cut short
        # by another disconnection is retried by the CONNECTED that follows.
        if state is SessionState.CONNECTED and self._registered:
            task = asyncio.ensure_future(self._reregister())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _reregister(self) -> None:
        async with self._lock:
            if not self._registered:  # unregistered (stopping) while this waited for the lock
                return
            try:
                await self._register_locked(self.read_only)
            except MetadataError as exc:
                log.error("bookie %s could not re-register after a session change: %s", self._config.bookie_id, exc)
