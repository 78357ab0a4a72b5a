"""The embedded metadata store served to other processes on one machine over a Unix socket (``unix://PATH``).

How this works: the multi-process standalone (broker/workers.py) keeps the
embedded ``file://`` tree in its parent process, which is the only one the
tree's flock admits, and serves it here. Every connection is one session:
the server opens an ``EmbeddedStore`` session on the tree for it, so
versions, sequential names, ephemerals and watches are exactly the embedded
store's (and ZooKeeper's). Requests of a connection run in arrival order,
one at a time, so a watch registered before a read is in force when the read
answers, as the interface promises. When the connection ends -- a clean
close, or the kernel closing the socket of a process killed with ``kill -9``
-- the session ends and its ephemeral nodes go at once: a dead worker's
bundle ownership is released without waiting for a session timeout, which
is what ZooKeeper would do after its timeout and what a Unix socket can
tell for certain.

The socket file is created with mode 0600 in a directory only its owner can
write, so only processes of the same user reach it.

Client side: storage/metadata/remote.py. Frames: storage/metadata/wire.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from storage.errors import BadArgumentsError, MetadataError, StorageError
from storage.metadata import open_store
from storage.metadata.api import MetadataStore, SessionState, Watch, WatchEvent
from storage.metadata.wire import OPS, WATCH_KINDS, FrameDecoder, encode, error_frame, stat_fields

log = logging.getLogger(__name__)

MAX_WATCHES_PER_SESSION = 100_000  # a broker holds a few per topic and namespace; this bounds a runaway client
MAX_SOCKET_PATH_BYTES = 107  # sun_path holds 108 bytes with the terminating NUL


class _Session(asyncio.Protocol):
    def __init__(self, server: "MetadataServer"):
        self._server = server
        self._decoder = FrameDecoder()
        self._queue: asyncio.Queue[list | None] = asyncio.Queue()
        self._transport: asyncio.Transport | None = None
        self._store: MetadataStore | None = None
        self._watches: dict[int, Watch] = {}
        self._task: asyncio.Task | None = None

    def connection_made(self, transport) -> None:
        self._transport = transport
        self._server.sessions.add(self)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except MetadataError as exc:
            log.warning("metadata client sent a bad frame (%s); closing its session", exc)
            self._transport.close()
            return
        for frame in frames:
            self._queue.put_nowait(frame)

    def connection_lost(self, exc) -> None:
        self._queue.put_nowait(None)

    def _send(self, message: list) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(encode(message))

    def _tell(self, state: SessionState) -> None:
        self._send([0, "session", state.value, self._store.session_id])

    async def _run(self) -> None:
        try:
            self._store = await open_store(self._server.store_url)
            self._store.add_session_listener(self._tell)
            self._tell(SessionState.CONNECTED)
            while (frame := await self._queue.get()) is not None:
                request_id = frame[0]
                try:
                    result = await self._handle(frame)
                except StorageError as exc:
                    self._send(error_frame(request_id, exc))
                    continue
                self._send([request_id, 0, result])
                if frame[1] == "close":
                    break
        except Exception:
            log.exception("metadata session failed")
        finally:
            await self._end()

    async def _end(self) -> None:
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        if self._store is not None:
            await self._store.close()  # the session's ephemerals go now
        if self._transport is not None:
            self._transport.close()
        self._server.sessions.discard(self)

    async def _handle(self, frame: list):
        op, args = frame[1], frame[2:]
        if op not in OPS:
            raise BadArgumentsError(f"unknown metadata operation {op!r}")
        store = self._store
        try:
            if op == "get":
                data, stat = await store.get(*args)
                return [data, stat_fields(stat)]
            if op == "exists":
                stat = await store.exists(*args)
                return None if stat is None else stat_fields(stat)
            if op == "create":
                path, data, ephemeral, sequential, make_parents = args
                return await store.create(path, _data(data), ephemeral=bool(ephemeral), sequential=bool(sequential),
                                          make_parents=bool(make_parents))
            if op == "set":
                path, data, version = args
                return stat_fields(await store.set(path, _data(data), _version(version)))
            if op == "delete":
                path, version = args
                await store.delete(path, _version(version))
                return None
            if op == "children":
                return await store.children(*args)
            if op == "watch":
                return self._watch(*args)
            if op == "unwatch":
                watch = self._watches.pop(args[0], None)
                if watch is not None:
                    watch.cancel()
                return None
            if op == "expire":
                await store.expire_session()
                return store.session_id
            return None  # close: the session ends in _run once this is answered
        except (TypeError, ValueError) as exc:  # wrong arity or argument types from the wire
            raise BadArgumentsError(f"bad arguments for metadata operation {op!r}: {exc}") from exc

    def _watch(self, watch_id: int, kind: str, path: str) -> None:
        if kind not in WATCH_KINDS or not isinstance(watch_id, int):
            raise BadArgumentsError(f"bad watch {watch_id!r} of kind {kind!r}")
        if len(self._watches) >= MAX_WATCHES_PER_SESSION and watch_id not in self._watches:
            raise BadArgumentsError(f"more than {MAX_WATCHES_PER_SESSION} watches on one metadata session")

        def fire(event: WatchEvent, watch_id=watch_id) -> None:
            self._send([0, "event", watch_id, event.type.value, event.path])

        register = self._store.watch_data if kind == "data" else self._store.watch_children
        old = self._watches.pop(watch_id, None)
        if old is not None:
            old.cancel()
        self._watches[watch_id] = register(path, fire)


def _data(value) -> bytes:
    # bytes(n) of an integer would allocate n zero bytes: only real bytes are node data.
    if not isinstance(value, bytes):
        raise BadArgumentsError(f"node data must be bytes, not {type(value).__name__}")
    return value


def _version(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadArgumentsError(f"expected version must be an integer, not {type(value).__name__}")
    return value


class MetadataServer:
    """Serves the store named by ``store_url`` (``file://`` or ``memory://``) on a Unix socket."""

    def __init__(self, store_url: str, socket_path: Path):
        self.store_url = store_url
        self.socket_path = Path(socket_path)
        self.sessions: set[_Session] = set()
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @classmethod
    async def start(cls, store_url: str, socket_path: Path) -> "MetadataServer":
        """Raises MetadataError when the socket cannot be bound (path too long, directory missing)."""
        server = cls(store_url, socket_path)
        path = server.socket_path
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise MetadataError(f"metadata socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes")
        try:
            path.unlink(missing_ok=True)  # left by a parent killed with kill -9; the tree's flock says we own it
            old_umask = os.umask(0o177)
            try:
                server._server = await asyncio.get_running_loop().create_unix_server(
                    lambda: _Session(server), str(path))
            finally:
                os.umask(old_umask)
        except OSError as exc:
            raise MetadataError(f"cannot serve the metadata store on {path}: {exc}") from exc
        return server

    async def close(self) -> None:
        """Stop accepting, end every session (their ephemerals go), remove the socket file."""
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions):
            if session._transport is not None:
                session._transport.close()
        for session in list(self.sessions):
            if session._task is not None:
                await asyncio.gather(session._task, return_exceptions=True)
        self.socket_path.unlink(missing_ok=True)

