"""One contract suite for every metadata-store backend: memory://, file:// and a real ZooKeeper.

Every test runs once per backend through ``open_store(url)`` (the
``metadata_url`` fixture). Waiting is always for an event with a deadline,
never a sleep.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from storage.errors import (
    BadArgumentsError,
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from storage.metadata import EventType, SessionState, open_store

DEADLINE_S = 10.0
SESSION_TIMEOUT_S = 4.0


@pytest.fixture
async def store(metadata_url):
    s = await open_store(metadata_url, session_timeout_s=SESSION_TIMEOUT_S)
    yield s
    await s.close()


@pytest.fixture
async def peer(metadata_url, store):
    """A second session on the same store."""
    s = await open_store(metadata_url, session_timeout_s=SESSION_TIMEOUT_S)
    yield s
    await s.close()


async def next_event(queue: asyncio.Queue, want, deadline_s: float = DEADLINE_S) -> object:
    """The first queued item satisfying ``want``, within the deadline."""
    async def find():
        while True:
            item = await queue.get()
            if want(item):
                return item
    return await asyncio.wait_for(find(), deadline_s)


async def observe(events: asyncio.Queue, read, expected) -> None:
    """Behave as a watcher should: after every notification re-read, until the state is ``expected``.

    Notifications may be coalesced, so this is the contract's guarantee:
    the re-reading watcher converges on every state that lasts.
    """
    async def converge():
        while await read() != expected:
            await events.get()
    await asyncio.wait_for(converge(), DEADLINE_S)


def seq_number(path: str) -> int:
    suffix = path.rsplit("-", 1)[1]
    assert len(suffix) == 10 and suffix.isdigit(), path
    return int(suffix)


# ---- nodes, versions, conditional writes ------------------------------------


async def test_create_get_set_delete_with_versions(store):
    assert await store.create("/a", b"one") == "/a"
    data, stat = await store.get("/a")
    assert (data, stat.version, stat.ephemeral_owner, stat.num_children) == (b"one", 0, 0, 0)
    stat = await store.set("/a", b"two", 0)
    assert stat.version == 1 and stat.modified_ms >= stat.created_ms
    assert (await store.get("/a"))[0] == b"two"
    assert (await store.set("/a", b"three")).version == 2  # -1: any version
    await store.create("/a/kid")
    assert (await store.exists("/a")).num_children == 1
    await store.delete("/a/kid", 0)
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


async def test_create_and_delete_errors_change_nothing(store):
    await store.create("/x", b"first")
    with pytest.raises(NodeExistsError):
        await store.create("/x", b"second")
    data, stat = await store.get("/x")
    assert (data, stat.version) == (b"first", 0)
    with pytest.raises(NoNodeError):
        await store.create("/missing/child")
    assert await store.exists("/missing") is None
    with pytest.raises(NoNodeError):
        await store.set("/nope", b"")
    with pytest.raises(NoNodeError):
        await store.delete("/nope")
    with pytest.raises(NoNodeError):
        await store.children("/nope")


async def test_make_parents_and_not_empty(store):
    assert await store.create("/deep/er/node", b"d", make_parents=True) == "/deep/er/node"
    assert await store.children("/deep") == ["er"]
    assert (await store.get("/deep/er"))[0] == b""
    with pytest.raises(NotEmptyError):
        await store.delete("/deep")
    assert await store.children("/deep/er") == ["node"]


@pytest.mark.parametrize("bad", ["relative", "/a//b", "/trailing/", "/a/./b", "/a/../b", ""])
async def test_invalid_paths_are_rejected(store, bad):
    for op in (store.get(bad), store.exists(bad), store.create(bad), store.set(bad, b""), store.children(bad)):
        with pytest.raises(BadArgumentsError):
            await op
    with pytest.raises(BadArgumentsError):
        store.watch_data(bad, lambda e: None)
    assert await store.children("/") in ([], ["zookeeper"])  # nothing was created anywhere


async def test_racing_conditional_writes_exactly_one_wins(store, peer):
    await store.create("/race", b"0")
    for round_ in range(3):
        _, stat = await store.get("/race")
        results = await asyncio.gather(
            store.set("/race", b"store%d" % round_, stat.version),
            peer.set("/race", b"peer%d" % round_, stat.version),
            return_exceptions=True,
        )
        assert sum(isinstance(r, BadVersionError) for r in results) == 1, results
        winner = b"store%d" % round_ if not isinstance(results[0], Exception) else b"peer%d" % round_
        data, now = await peer.get("/race")
        assert (data, now.version) == (winner, stat.version + 1)


async def test_ensure_path_and_delete_recursive(store):
    await store.create("/t", b"keep")
    await store.ensure_path("/t/u/v")
    await store.ensure_path("/t/u/v")  # idempotent
    assert (await store.get("/t"))[0] == b"keep"  # an existing node is left alone
    await store.create("/t/u/v/w", b"x")
    await store.create("/t/u/z")
    await store.delete_recursive("/t")
    assert await store.exists("/t") is None
    await store.delete_recursive("/t")  # missing: ignored


# ---- sequential nodes ----------------------------------------------------------


async def test_sequential_nodes_are_numbered_per_parent(store, peer):
    await store.create("/q")
    paths = [await store.create("/q/item-", sequential=True) for _ in range(3)]
    assert [seq_number(p) for p in paths] == [0, 1, 2]
    assert all(p.startswith("/q/item-") for p in paths)
    # The counter is the parent's count of child creations, whoever creates them
    # and of whatever kind (ZooKeeper 3.8 measured): deletions do not advance it,
    # and a number is never handed out twice.
    await store.delete(paths[-1])
    assert seq_number(await peer.create("/q/item-", sequential=True)) == 3
    await store.create("/q/plain")
    await store.delete("/q/plain")
    await store.delete(paths[0])
    assert seq_number(await store.create("/q/item-", sequential=True)) == 5
    # Every parent has its own counter, starting at zero.
    assert seq_number(await store.create("/r/item-", sequential=True, make_parents=True)) == 0
    assert await store.children("/q") == ["item-0000000001", "item-0000000003", "item-0000000005"]


async def test_ephemeral_sequential_node(store, peer):
    await store.create("/election")
    mine = await store.create("/election/n-", ephemeral=True, sequential=True)
    theirs = await peer.create("/election/n-", ephemeral=True, sequential=True)
    assert seq_number(theirs) == seq_number(mine) + 1
    assert (await peer.exists(mine)).ephemeral_owner == store.session_id


# ---- sessions and ephemeral nodes ---------------------------------------------------


async def test_each_store_is_its_own_session(store, peer):
    assert store.session_id != peer.session_id
    await store.create("/mine", ephemeral=True)
    await peer.create("/theirs", ephemeral=True)
    assert (await peer.exists("/mine")).ephemeral_owner == store.session_id
    assert (await store.exists("/theirs")).ephemeral_owner == peer.session_id


async def test_ephemeral_nodes_vanish_when_their_session_closes(metadata_url, peer):
    owner = await open_store(metadata_url, session_timeout_s=SESSION_TIMEOUT_S)
    await owner.create("/live", b"")
    await owner.create("/live/b1", b"me", ephemeral=True)
    stat = await peer.exists("/live/b1")
    assert stat is not None and stat.ephemeral_owner == owner.session_id
    gone = asyncio.Queue()
    peer.watch_data("/live/b1", gone.put_nowait)
    assert await peer.exists("/live/b1") is not None  # register, then read: the watch is in force
    await owner.close()
    await next_event(gone, lambda e: e.type is EventType.DELETED)
    assert await peer.children("/live") == []
    assert await peer.exists("/live") is not None  # persistent nodes of the session stay


async def test_ephemeral_nodes_may_not_have_children(store):
    await store.create("/eph", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/eph/child")
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/eph/a/b", make_parents=True)
    assert await store.children("/eph") == []


async def test_session_expiry_deletes_ephemerals_and_tells_the_owner(store, peer):
    states = asyncio.Queue()
    threads = set()

    def listener(state):
        threads.add(threading.get_ident())
        states.put_nowait(state)

    store.add_session_listener(listener)
    await store.create("/kept", b"p")
    await store.create("/reg", b"", ephemeral=True)
    gone = asyncio.Queue()
    peer.watch_data("/reg", gone.put_nowait)
    assert await peer.exists("/reg") is not None
    old = store.session_id

    await store.expire_session()
    await next_event(states, lambda s: s is SessionState.LOST)
    await next_event(states, lambda s: s is SessionState.CONNECTED)  # LOST came first
    assert threads == {threading.get_ident()}, "listeners run on the loop's thread"
    assert store.session_id != old
    await next_event(gone, lambda e: e.type is EventType.DELETED)
    assert await peer.exists("/reg") is None
    assert (await store.get("/kept"))[0] == b"p"
    # Usable afterwards, on the new session.
    await store.create("/reg", b"again", ephemeral=True)
    assert (await peer.exists("/reg")).ephemeral_owner == store.session_id


async def test_watches_survive_session_expiry(store, peer):
    events = asyncio.Queue()
    store.watch_data("/after", events.put_nowait)
    assert await store.exists("/after") is None
    await store.expire_session()
    assert await store.exists("/after") is None  # on the new session: any re-arm is done
    await peer.create("/after", b"x")
    await next_event(events, lambda e: e.type is EventType.CREATED)


async def test_closed_store_refuses_work(metadata_url):
    s = await open_store(metadata_url, session_timeout_s=SESSION_TIMEOUT_S)
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(SessionExpiredError):
        await s.get("/")
    with pytest.raises(SessionExpiredError):
        await s.create("/after-close")
    with pytest.raises(SessionExpiredError):
        s.watch_data("/", lambda e: None)


# ---- watches -------------------------------------------------------------------------


async def test_data_watch_sees_create_change_delete_until_cancelled(store, peer):
    events = asyncio.Queue()
    threads = set()

    def callback(event):
        threads.add(threading.get_ident())
        events.put_nowait(event)

    watch = peer.watch_data("/w", callback)

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
    assert threads == {threading.get_ident()}, "callbacks run on the loop's thread"
    watch.cancel()
    watch.cancel()  # idempotent
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


async def test_data_watch_event_types(store, peer):
    events = asyncio.Queue()
    peer.watch_data("/typed", events.put_nowait)
    assert await peer.exists("/typed") is None
    # Each change waits for the previous event and for the watcher's re-read (which the
    # contract asks of every watcher), so no two changes can be coalesced into one event.
    await store.create("/typed", b"1")
    assert (await next_event(events, lambda e: True)).type is EventType.CREATED
    assert (await peer.get("/typed"))[0] == b"1"
    await store.set("/typed", b"2")
    assert (await next_event(events, lambda e: True)).type is EventType.CHANGED
    assert (await peer.get("/typed"))[0] == b"2"
    await store.delete("/typed")
    event = await next_event(events, lambda e: True)
    assert (event.type, event.path) == (EventType.DELETED, "/typed")
    assert events.empty()


async def test_watches_on_own_changes(store):
    events = asyncio.Queue()
    store.watch_data("/self", events.put_nowait)
    assert await store.exists("/self") is None
    await store.create("/self")
    await next_event(events, lambda e: e.type is EventType.CREATED and e.path == "/self")


async def test_children_watch(store, peer):
    events = asyncio.Queue()
    await store.create("/kids")
    peer.watch_children("/kids", events.put_nowait)

    async def read():
        return await peer.children("/kids")

    assert await read() == []
    await store.create("/kids/a")
    await observe(events, read, ["a"])
    await store.create("/kids/b", ephemeral=True)
    await observe(events, read, ["a", "b"])
    await store.delete("/kids/a")
    await observe(events, read, ["b"])
    await store.delete("/kids/b")
    await observe(events, read, [])
    await store.delete("/kids")
    await next_event(events, lambda e: e.type is EventType.DELETED and e.path == "/kids")


async def test_children_watch_on_missing_node_fires_once_it_appears(store, peer):
    events = asyncio.Queue()
    peer.watch_children("/later", events.put_nowait)
    assert await peer.exists("/later") is None
    await store.create("/later/x", make_parents=True)
    await next_event(events, lambda e: e.path == "/later" and e.type is EventType.CHILDREN_CHANGED)

    async def read():
        return await peer.children("/later")

    await observe(events, read, ["x"])
    await store.create("/later/y")  # and it keeps watching the children afterwards
    await observe(events, read, ["x", "y"])


async def test_cancelled_children_watch_stops(store, peer):
    events = asyncio.Queue()
    await store.create("/quiet")
    watch = peer.watch_children("/quiet", events.put_nowait)
    assert await peer.children("/quiet") == []
    watch.cancel()
    await store.create("/quiet/a")
    marker = asyncio.Queue()
    peer.watch_children("/quiet", marker.put_nowait)
    assert await peer.children("/quiet") == ["a"]
    await store.create("/quiet/b")
    await next_event(marker, lambda e: e.type is EventType.CHILDREN_CHANGED)
    assert events.empty()
