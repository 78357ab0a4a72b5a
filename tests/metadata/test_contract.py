"""One contract suite for every metadata-store backend: memory://, file:// and a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from storage.errors import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from storage.metadata import EventType, SessionState, open_store

DEADLINE_S = 10.0


@pytest.fixture
async def store(metadata_url):
    s = await open_store(metadata_url, session_timeout_s=4.0)
    yield s
    await s.close()


@pytest.fixture
async def peer(metadata_url, store):
    """A second session on the same store."""
    s = await open_store(metadata_url, session_timeout_s=4.0)
    yield s
    await s.close()


async def next_event(queue: asyncio.Queue, want) -> object:
    """The first queued item satisfying ``want``, within the deadline."""
    async def find():
        while True:
            item = await queue.get()
            if want(item):
                return item
    return await asyncio.wait_for(find(), DEADLINE_S)


async def test_create_get_set_delete_with_versions(store):
    assert await store.create("/a", b"one") == "/a"
    data, stat = await store.get("/a")
    assert (data, stat.version, stat.ephemeral_owner) == (b"one", 0, 0)
    stat = await store.set("/a", b"two", 0)
    assert stat.version == 1
    assert (await store.get("/a"))[0] == b"two"
    assert (await store.set("/a", b"three")).version == 2  # -1: any version
    await store.delete("/a", 2)
    assert await store.exists("/a") is None
    with pytest.raises(NoNodeError):
        await store.get("/a")


async def test_conditional_write_conflict_changes_nothing(store):
    await store.create("/v", b"base")
    await store.set("/v", b"next", 0)
    with pytest.raises(BadVersionError):
        await store.set("/v", b"stale", 0)
    with pytest.raises(BadVersionError):
        await store.delete("/v", 0)
    data, stat = await store.get("/v")
    assert (data, stat.version) == (b"next", 1)


async def test_create_errors(store):
    await store.create("/x")
    with pytest.raises(NodeExistsError):
        await store.create("/x")
    with pytest.raises(NoNodeError):
        await store.create("/missing/child")
    assert await store.create("/deep/er/node", b"d", make_parents=True) == "/deep/er/node"
    assert await store.children("/deep") == ["er"]
    with pytest.raises(NotEmptyError):
        await store.delete("/deep")
    with pytest.raises(NoNodeError):
        await store.delete("/nope")


async def test_sequential_nodes_are_numbered_per_parent(store):
    await store.create("/q")
    paths = [await store.create("/q/item-", sequential=True) for _ in range(3)]
    numbers = [int(p.rsplit("-", 1)[1]) for p in paths]
    assert all(len(p.rsplit("-", 1)[1]) == 10 for p in paths)
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    other = await store.create("/r/item-", sequential=True, make_parents=True)
    assert other.startswith("/r/item-")


async def test_ephemeral_nodes_vanish_when_their_session_closes(metadata_url, peer):
    owner = await open_store(metadata_url, session_timeout_s=4.0)
    await owner.create("/live", b"")
    await owner.create("/live/b1", b"me", ephemeral=True)
    stat = await peer.exists("/live/b1")
    assert stat is not None and stat.ephemeral_owner == owner.session_id
    with pytest.raises(NoChildrenForEphemeralsError):
        await owner.create("/live/b1/child")
    gone = asyncio.Queue()
    peer.watch_data("/live/b1", gone.put_nowait)
    assert await peer.exists("/live/b1") is not None
    await owner.close()
    await next_event(gone, lambda e: e.type is EventType.DELETED)
    assert await peer.children("/live") == []


async def test_session_expiry_deletes_ephemerals_and_tells_the_owner(store, peer):
    states = asyncio.Queue()
    store.add_session_listener(states.put_nowait)
    await store.create("/reg", b"", ephemeral=True)
    old = store.session_id
    await store.expire_session()
    await next_event(states, lambda s: s is SessionState.LOST)
    await next_event(states, lambda s: s is SessionState.CONNECTED)
    assert store.session_id != old
    assert await peer.exists("/reg") is None
    # usable afterwards, on the new session
    await store.create("/reg", b"again", ephemeral=True)
    assert (await peer.exists("/reg")).ephemeral_owner == store.session_id


async def observe(events: asyncio.Queue, read, expected) -> None:
    """Behave as a watcher should: after every notification re-read, until the state is ``expected``.

    Notifications may be coalesced, so this is the contract's guarantee:
    the re-reading watcher converges on every state that lasts.
    """
    async def converge():
        while await read() != expected:
            await events.get()
    await asyncio.wait_for(converge(), DEADLINE_S)


async def test_data_watch_sees_create_change_delete_until_cancelled(store, peer):
    events = asyncio.Queue()
    watch = peer.watch_data("/w", events.put_nowait)

    async def read():
        stat = await peer.exists("/w")
        return None if stat is None else (await peer.get("/w"))[0]

    assert await read() is None  # register, then read: the watch is now in force
    await store.create("/w", b"1")
    await observe(events, read, b"1")
    await store.set("/w", b"2")
    await observe(events, read, b"2")
    await store.delete("/w")
    await observe(events, read, None)
    watch.cancel()
    while not events.empty():
        events.get_nowait()
    await store.create("/w", b"3")
    # A later, still-registered watch proves delivery happened; the cancelled one stayed silent.
    marker = asyncio.Queue()
    peer.watch_data("/marker", marker.put_nowait)
    assert await peer.exists("/marker") is None
    await store.create("/marker")
    await next_event(marker, lambda e: e.type is EventType.CREATED)
    assert events.empty()


async def test_children_watch(store, peer):
    events = asyncio.Queue()
    await store.create("/kids")
    peer.watch_children("/kids", events.put_nowait)

    async def read():
        return await peer.children("/kids")

    assert await read() == []
    await store.create("/kids/a")
    await observe(events, read, ["a"])
    await store.delete("/kids/a")
    await observe(events, read, [])
    await store.delete("/kids")
    await next_event(events, lambda e: e.type is EventType.DELETED and e.path == "/kids")


async def test_children_watch_on_missing_node_fires_once_it_appears(store, peer):
    events = asyncio.Queue()
    peer.watch_children("/later", events.put_nowait)
    assert await peer.exists("/later") is None
    await store.create("/later/x", make_parents=True)
    await next_event(events, lambda e: e.path == "/later")
    assert await peer.children("/later") == ["x"]


async def test_racing_conditional_writes_exactly_one_wins(store, peer):
    await store.create("/race", b"0")
    _, stat = await store.get("/race")
    results = await asyncio.gather(
        store.set("/race", b"store", stat.version), peer.set("/race", b"peer", stat.version), return_exceptions=True
    )
    assert sum(isinstance(r, BadVersionError) for r in results) == 1
    winner = b"store" if not isinstance(results[0], Exception) else b"peer"
    assert (await store.get("/race"))[0] == winner


async def test_ensure_path_and_delete_recursive(store):
    await store.ensure_path("/t/u/v")
    await store.ensure_path("/t/u/v")  # idempotent
    await store.create("/t/u/v/w", b"x")
    await store.delete_recursive("/t")
    assert await store.exists("/t") is None
    await store.delete_recursive("/t")  # missing: ignored
