"""What only the ZooKeeper backend has to handle: chroots, an unreachable server, a server restart."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from storage.errors import MetadataConnectionError
from storage.metadata import EventType, SessionState, open_store
from storage.metadata.zookeeper import ZooKeeperStore
from storage.testing.processes import free_port
from storage.testing.zookeeper import ZooKeeperServer
from tests.metadata.test_contract import next_event

DEADLINE_S = 15.0


async def next_item(queue: asyncio.Queue, want) -> object:
    return await next_event(queue, want, DEADLINE_S)


async def test_chroot_is_created_and_isolates(zookeeper_server):
    name = f"/t-{uuid.uuid4().hex[:12]}/nested"
    async with await open_store(zookeeper_server.url(name)) as inside:
        await inside.create("/ledgers", b"mine")
        assert await inside.children("/") == ["ledgers"]
        async with await open_store(zookeeper_server.url()) as whole:
            assert (await whole.get(f"{name}/ledgers"))[0] == b"mine"
        async with await open_store(zookeeper_server.url(f"/t-{uuid.uuid4().hex[:12]}")) as neighbour:
            assert await neighbour.exists("/ledgers") is None


async def test_unreachable_server_is_a_retriable_connection_error():
    with pytest.raises(MetadataConnectionError) as caught:
        await open_store(f"zk://127.0.0.1:{free_port()}/x", session_timeout_s=1.0)
    assert caught.value.retriable


@pytest.fixture
def private_zookeeper(tmp_path):
    """A server of this test's own, free to be killed and restarted."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    yield server
    server.stop()


async def test_session_survives_a_server_restart(private_zookeeper):
    url = private_zookeeper.url("/restart")
    store = await ZooKeeperStore.open(url.removeprefix("zk://"), session_timeout_s=20.0, operation_timeout_s=1.0)
    states = asyncio.Queue()
    store.add_session_listener(states.put_nowait)
    await store.create("/owner", b"", ephemeral=True)
    events = asyncio.Queue()
    store.watch_data("/w", events.put_nowait)
    assert await store.exists("/w") is None
    session = store.session_id

    private_zookeeper.stop(kill=True)
    await next_item(states, lambda s: s is SessionState.SUSPENDED)
    with pytest.raises(MetadataConnectionError) as caught:
        await store.exists("/owner")  # no server: answered by the operation timeout, not a hang
    assert caught.value.retriable

    await asyncio.to_thread(private_zookeeper.start)
    await next_item(states, lambda s: s is SessionState.CONNECTED)
    assert store.session_id == session
    assert (await store.exists("/owner")).ephemeral_owner == session, "the session and its ephemerals survived"
    # kazoo forgot every watch when the connection dropped; ours must have been re-armed.
    async with await open_store(url) as peer:
        await peer.create("/w", b"after")
        await next_item(events, lambda e: e.type is EventType.CREATED)
    await store.close()


class _Recorder:
    """Just enough of ZooKeeperStore for a _ZkWatch whose arms go nowhere: the test plays the re-arm's answer."""

    _closed = False

    def __init__(self):
        self._watches = set()

    class _client:
        @staticmethod
        def get_children_async(*args, **kwargs):
            class _Pending:
                def rawlink(self, callback):
                    pass
            return _Pending()

        exists_async = get_children_async


@pytest.mark.parametrize("fired, rearm_found, reported", [
    # a children watch fires, and before its re-arm the node itself is deleted: that deletion is reported
    (EventType.CHILDREN_CHANGED, -1, [EventType.CHILDREN_CHANGED, EventType.DELETED]),
    # ... but a child change the re-arm finds is not (the callback's re-read covers it)
    (EventType.CHILDREN_CHANGED, 42, [EventType.CHILDREN_CHANGED]),
    # a deleted node found missing again: nothing new; found re-created: reported
    (EventType.DELETED, -1, [EventType.DELETED]),
    (EventType.DELETED, 42, [EventType.DELETED, EventType.CHILDREN_CHANGED]),
])
def test_a_change_between_a_firing_and_its_rearm_is_reported_when_a_reread_cannot_see_it(fired, rearm_found, reported):
    from storage.metadata.zookeeper import _ZkWatch

    seen = []
    watch = _ZkWatch(_Recorder(), "/kids", lambda event: seen.append(event.type), children=True)
    watch._deliver(fired)
    watch._observed(rearm_found)
    assert seen == reported
