"""ManagedLedgerFactory: opens managed ledgers by name and is the context (store, ledger client, clock, hooks).

The ledger client is any storage.client.api.LedgerClient: the real one, or
storage.client.memory for tests that need no bookies.

One factory per process serves every topic: ``open`` shares a managed
ledger between concurrent callers and never opens the same name twice.
``hooks`` is the seam for scripted faults in tests (e.g. stopping between
"removed from the list" and "deleted from the bookies").
``password_secret`` derives every ledger's password (passwords.py); without
it ledgers keep the legacy empty password. ``previous_password_secrets``
still open ledgers created under earlier secrets.
"""

from __future__ import annotations

import asyncio
import logging
import time

from storage.client import api
from storage.errors import NoNodeError, StorageError
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.ledger import ManagedLedger
from storage.managed_ledger.metadata import ROOT, ledger_path
from storage.managed_ledger.passwords import LedgerPasswords
from storage.shared_load import SharedLoads

log = logging.getLogger(__name__)


class Hooks:
    """Points where a test can inject a fault; the defaults do nothing."""

    async def before_delete_ledger(self, ml, ledger_id: int) -> None:
        return None

    async def before_cursor_chunk(self, cursor, ledger_id: int, index: int, count: int) -> None:
        """Before chunk ``index`` of ``count`` of a cursor state is added to cursor ledger ``ledger_id``."""
        return None


class ManagedLedgerFactory:
    def __init__(self, store, client: api.LedgerClient, *, clock=time.time, hooks: Hooks | None = None,
                 password_secret: bytes | None = None, previous_password_secrets: tuple[bytes, ...] = ()):
        self.store = store
        self.client = client
        self.passwords = LedgerPasswords(password_secret, previous_password_secrets)
        self.clock = clock
        self.hooks = hooks or Hooks()
        self._ledgers: dict[str, ManagedLedger] = {}
        self._opening: SharedLoads[ManagedLedger] = SharedLoads()
        self._tasks: set[asyncio.Task] = set()

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """Open (creating if needed) the managed ledger ``name``; fences its previous owner."""
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml

        async def start() -> ManagedLedger:
            opened = await ManagedLedger(self, name, (config or ManagedLedgerConfig()).validate()).open()
            self._ledgers[name] = opened
            return opened

        return await self._opening.load(name, start)

    def get(self, name: str) -> ManagedLedger | None:
        return self._ledgers.get(name)

    async def exists(self, name: str) -> bool:
        return await self.store.exists(ledger_path(name)) is not None

    async def list(self, prefix: str) -> list[str]:
        """Names of managed ledgers directly under ``prefix`` (e.g. ``tenant/ns/persistent``)."""
        try:
            return [f"{prefix}/{child}" for child in await self.store.children(f"{ROOT}/{prefix}")]
        except NoNodeError:
            return []

    def forget(self, ml: ManagedLedger) -> None:
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._quietly(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _quietly(coro) -> None:
        try:
            await coro
        except StorageError as exc:  # background trims: the next one tries again
            log.warning("background managed-ledger task failed: %s", exc)

    async def settle(self) -> None:
        """Wait for the background tasks started so far (trims after acks and rollovers) to finish."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        for ml in list(self._ledgers.values()):
            await ml.close()
        for task in list(self._tasks):
            task.cancel()
