"""The served metadata store (unix://, storage/metadata/served.py + remote.py) beyond the common contract:
a connection is a session, bad input harms only its sender, and a client outlives a server restart."""

from __future__ import annotations

import asyncio
import struct
import tempfile
import uuid
from pathlib import Path

import pytest

from storage.errors import BadArgumentsError
from storage.metadata import EventType, SessionState, open_store
from storage.metadata.served import MetadataServer
from storage.metadata.wire import MAX_FRAME_BYTES

DEADLINE_S = 10.0


@pytest.fixture
async def served():
    socket_dir = Path(tempfile.mkdtemp(prefix="mdsrv-"))
    url = f"memory://{uuid.uuid4().hex}"
    keeper = await open_store(url)  # keeps the tree alive across server restarts, as the supervisor's session does
    server = await MetadataServer.start(url, socket_dir / "metadata.sock")
    yield server
    await server.close()
    await keeper.close()
    socket_dir.rmdir()


async def until(queue: asyncio.Queue, want):
    async def find():
        while not want(item := await queue.get()):
            pass
        return item
    return await asyncio.wait_for(find(), DEADLINE_S)


async def test_a_garbage_frame_ends_only_its_own_session(served):
    peer = await open_store(served.url)
    owner = await open_store(served.url)
    await owner.create("/eph", b"", ephemeral=True)
    events = asyncio.Queue()
    peer.watch_data("/eph", events.put_nowait)
    assert await peer.exists("/eph") is not None
    # A raw connection speaking garbage: a frame that is not msgpack, and one longer than the limit.
    for junk in (struct.pack(">I", 3) + b"\xc1\xc1\xc1", struct.pack(">I", MAX_FRAME_BYTES + 1)):
        reader, writer = await asyncio.open_unix_connection(str(served.socket_path))
        writer.write(junk)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) is not None  # hello, then EOF: the server hung up
        writer.close()
    assert await peer.exists("/eph") is not None  # other sessions untouched
    await owner.close()
    await until(events, lambda e: e.type is EventType.DELETED)
    await peer.close()


async def test_a_connection_that_dies_takes_its_ephemerals_at_once(served):
    peer = await open_store(served.url)
    victim = await open_store(served.url)
    await victim.create("/owner", b"victim", ephemeral=True)
    events = asyncio.Queue()
    peer.watch_data("/owner", events.put_nowait)
    assert await peer.exists("/owner") is not None
    victim._closing = True  # no reconnect: this is the process dying, as kill -9 would end it
    victim._conn.transport.abort()
    await until(events, lambda e: e.type is EventType.DELETED)
    assert await peer.exists("/owner") is None
    await peer.close()


async def test_an_oversized_write_is_refused_and_the_session_goes_on(served):
    store = await open_store(served.url)
    with pytest.raises(BadArgumentsError, match="exceeds"):
        await store.create("/big", b"x" * (MAX_FRAME_BYTES + 1))
    assert await store.create("/small", b"x") == "/small"
    await store.close()


async def test_a_client_outlives_a_server_restart_as_a_new_session_with_its_watches(served):
    store = await open_store(served.url)
    states = asyncio.Queue()
    store.add_session_listener(states.put_nowait)
    events = asyncio.Queue()
    store.watch_children("/kids", events.put_nowait)
    await store.create("/eph", b"", ephemeral=True)
    old_session = store.session_id

    await served.close()
    await until(states, lambda s: s is SessionState.SUSPENDED)
    restarted = await MetadataServer.start(served.store_url, served.socket_path)
    try:
        await until(states, lambda s: s is SessionState.LOST)
        await until(states, lambda s: s is SessionState.CONNECTED)
        assert store.session_id != old_session
        assert await store.exists("/eph") is None  # the old session's ephemeral went with it
        other = await open_store(restarted.url)
        await other.create("/kids/a", b"", make_parents=True)
        await until(events, lambda e: e.type is EventType.CHILDREN_CHANGED)  # the watch was registered again
        await other.close()
        await store.close()
    finally:
        await restarted.close()


async def test_wrongly_typed_arguments_are_refused_by_name(served):
    """A client that sends an integer as node data would otherwise make the server allocate that many bytes."""
    store = await open_store(served.url)
    for op, args in (("create", ["/n", 10**9, False, False, False]), ("set", ["/n", b"x", "0"]),
                     ("create", ["/n"]), ("delete", ["/n", 1.5])):
        with pytest.raises(BadArgumentsError):
            await store._call(op, *args)
    assert await store.exists("/n") is None  # nothing was created, and the session goes on
    await store.close()
