"""After its metadata session expires, a broker registers again on its new session (nemesis seed 1)."""

from __future__ import annotations

import asyncio

from broker.ownership.ownership import BROKERS_ROOT, BrokerInfo, Ownership
from storage.errors import NoNodeError
from storage.metadata import open_store
from storage.testing.waiting import wait_until_async


async def test_seed1_partition_broker_expired_session_registers_again_on_the_new_session(zk_url):
    """The partition-broker round of seed 1: the re-registration started at once ran on the expired session
    (SessionExpiredError, an unretrieved task exception) and the broker stayed unregistered until its next
    load report. It must wait for the new session and register there."""
    store = await open_store(zk_url, session_timeout_s=4)
    path = f"{BROKERS_ROOT}/reregister-a"
    lost = asyncio.Event()
    registering: list[asyncio.Task] = []

    def session_lost() -> None:  # what BrokerService._session_lost does: unload, and register again
        lost.set()
        registering.append(asyncio.get_running_loop().create_task(me.register()))

    try:
        me = Ownership(store, BrokerInfo("reregister-a", "pulsar://a:6650", "http://a:8080"), 4, session_lost)
        await me.register()
        first_session = store.session_id
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
        await registering[0]  # it succeeded: before the fix it raised SessionExpiredError
    finally:
        await store.close()
