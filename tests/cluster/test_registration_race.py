"""A broker restarted on its address registers even when its previous incarnation's node expires mid-way.

Nemesis seed 7 (`python -m loadtest.nemesis --seed 7 --rounds 100`): a broker killed with -9 and started again
at once found its previous session's registration node, and that session expired between two steps of the
registration: the start failed with NoNodeError ("broker: refusing to start"). The expiry is scripted here:
the old incarnation's session ends just before the new one's ``op`` reaches ZooKeeper.
"""

from __future__ import annotations

import pytest

from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, Ownership
from storage.metadata import open_store

INFO = BrokerInfo("same", "pulsar://same:6650", "http://same:8080")


class _OldSessionEndsBefore:
    """The new incarnation's store: just before its first ``op``, the old incarnation's session is closed."""

    def __init__(self, store, old_store, op: str):
        self._store, self.old, self._op = store, old_store, op

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def _maybe_end_old(self, op: str) -> None:
        if op == self._op and self.old is not None:
            old, self.old = self.old, None
            await old.close()  # its ephemeral nodes go with it

    async def get(self, path):
        await self._maybe_end_old("get")
        return await self._store.get(path)

    async def delete(self, path, expected_version=-1):
        await self._maybe_end_old("delete")
        return await self._store.delete(path, expected_version)


@pytest.mark.parametrize("op", ["get", "delete"])
async def test_seed_7_a_restart_registers_although_the_old_node_expires_between_two_steps(zk_url, op):
    old_store = await open_store(zk_url, session_timeout_s=10)
    new_store = await open_store(zk_url, session_timeout_s=10)
    store = _OldSessionEndsBefore(new_store, old_store, op)
    try:
        await Ownership(old_store, INFO, 4, lambda: None).register()  # the killed incarnation's node
        new = Ownership(store, INFO, 4, lambda: None, owns_address=True)
        await new.register()
        assert store.old is None  # the old session did end mid-way
        _, stat = await new_store.get(f"{BROKERS_ROOT}/same")
        assert stat.ephemeral_owner == new_store.session_id
    finally:
        await new_store.close()
        if store.old is not None:
            await old_store.close()
