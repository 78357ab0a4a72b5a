"""After its metadata session expires, a broker registers again on its new session (nemesis seed 1)."""

from __future__ import annotations

import asyncio
import logging

from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, Ownership
from storage.errors import NoNodeError
from storage.metadata import open_store
from storage.testing.waiting import wait_until_async


async def test_seed1_partition_broker_expired_session_registers_again_on_the_new_session(zk_url, caplog):
    """The partition-broker round of seed 1: the re-registration started at once ran on the expired session
    (SessionExpiredError, an unretrieved task exception) and the broker stayed unregistered until its next
    load report. It must wait for the new session and register there."""
    store = await open_store(zk_url, session_timeout_s=4)
    path = f"{BROKERS_ROOT}/reregister-a"
    lost = asyncio.Event()
    try:
        me = Ownership(store, BrokerInfo("reregister-a", "pulsar://a:6650", "http://a:8080"), 4, lost.set)
        await me.register()
        first_session = store.session_id
        caplog.set_level(logging.WARNING)
        await store.expire_session()
        await asyncio.wait_for(lost.wait(), 15)
        assert store.session_id != first_session

        async def registered_on_new_session() -> bool:
            try:
                _, stat = await store.get(path)
            except NoNodeError:
                return False
            return stat.ephemeral_owner == store.session_id

        await wait_until_async(registered_on_new_session, 15, "the registration under the new session")
        assert not [r for r in caplog.records if "registering on the new metadata session failed" in r.getMessage()]
    finally:
        await store.close()
