"""A session on a metadata store served over a Unix socket (``unix://PATH``, storage/metadata/served.py).

How this works: one connection is one session on the server's embedded tree.
Requests are pipelined with ids; the server answers them in order. Watches
are registered by a request sent at once (the interface's ``watch_data`` is
synchronous), so any operation issued after it is answered after the watch
is in force. The server pushes watch events and session changes; callbacks
and listeners run on this store's event loop.

When the connection breaks (the serving process is gone or restarting), the
session is gone with it: operations raise ``MetadataConnectionError``,
listeners hear ``SUSPENDED``, and the store keeps reconnecting. A new
connection is a new session, so listeners then hear ``LOST`` and
``CONNECTED``, and every live watch is registered again on it -- the same
sequence a ZooKeeper client sees after its session expired.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from storage.errors import MetadataConnectionError, MetadataError, SessionExpiredError
from storage.metadata.api import (
    ANY_VERSION,
    EventType,
    MetadataStore,
    SessionListener,
    SessionState,
    Stat,
    Watch,
    WatchCallback,
    WatchEvent,
    check_path,
)
from storage.metadata.wire import FrameDecoder, encode, error_from, stat_from

log = logging.getLogger(__name__)

RECONNECT_INTERVAL_S = 0.2
CONNECT_TIMEOUT_S = 10.0


class _RemoteWatch(Watch):
    def __init__(self, store: "RemoteStore", watch_id: int, kind: str, path: str, callback: WatchCallback):
        self.store, self.watch_id, self.kind, self.path, self.callback = store, watch_id, kind, path, callback
        self.cancelled = False

    def deliver(self, event: WatchEvent) -> None:
        if not self.cancelled:
            self.callback(event)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.store._forget(self)


class _Connection(asyncio.Protocol):
    def __init__(self, store: "RemoteStore"):
        self.store = store
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.hello: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except MetadataError as exc:
            log.error("metadata server sent a bad frame (%s); reconnecting", exc)
            self.transport.close()
            return
        for frame in frames:
            self.store._on_frame(self, frame)

    def connection_lost(self, exc) -> None:
        if not self.hello.done():
            self.hello.set_exception(MetadataConnectionError("metadata server closed the connection"))
        self.store._on_lost(self)


class RemoteStore(MetadataStore):
    """One session on a served metadata store. Open with ``open_store('unix:///path/to/socket')``."""

    def __init__(self, socket_path: str, loop: asyncio.AbstractEventLoop):
        self._path = socket_path
        self._loop = loop
        self._conn: _Connection | None = None
        self._session_id = 0
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._watches: dict[int, _RemoteWatch] = {}
        self._listeners: list[SessionListener] = []
        self._closed = False
        self._closing = False  # close() sent: the server ending the connection is expected
        self._reconnecting: asyncio.Task | None = None

    @classmethod
    async def open(cls, socket_path: str, *, session_timeout_s: float = 10.0) -> "RemoteStore":
        """Raises MetadataConnectionError when nothing serves ``socket_path``."""
        if not socket_path:
            raise ValueError("unix:// metadata store URL needs a socket path, e.g. unix:///data/metadata.sock")
        store = cls(socket_path, asyncio.get_running_loop())
        await store._connect()
        return store

    async def _connect(self) -> None:
        try:
            # asyncio.timeout, not wait_for: in 3.11 wait_for can swallow a cancellation when the connect fails at
            # the same moment, and a reconnect loop that swallows its cancellation never ends.
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, conn = await self._loop.create_unix_connection(lambda: _Connection(self), self._path)
                self._session_id = await conn.hello
        except OSError as exc:  # TimeoutError included
            raise MetadataConnectionError(f"cannot reach the metadata store at unix://{self._path}: {exc}") from exc
        self._conn = conn

    # ---- frames from the server ---------------------------------------------------

    def _on_frame(self, conn: _Connection, frame: list) -> None:
        request_id = frame[0]
        if request_id:
            future = self._pending.pop(request_id, None)
            if future is not None and not future.done() and len(frame) == 3:
                if frame[1] == 0:
                    future.set_result(frame[2])
                else:
                    future.set_exception(error_from(frame[1], str(frame[2])))
            return
        kind = frame[1]
        if kind == "event" and len(frame) == 5:
            watch = self._watches.get(frame[2])
            if watch is not None:
                self._loop.call_soon(watch.deliver, WatchEvent(EventType(frame[3]), frame[4]))
        elif kind == "session" and len(frame) == 4:
            state = SessionState(frame[2])
            if state is SessionState.CONNECTED and not conn.hello.done():
                conn.hello.set_result(frame[3])  # a new connection's first frame
                return
            if state is SessionState.CONNECTED:
                self._session_id = frame[3]  # a fresh session after expire_session
            self._tell(state)

    def _on_lost(self, conn: _Connection) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(MetadataConnectionError(f"lost the metadata store at unix://{self._path}"))
        self._pending.clear()
        if not (self._closed or self._closing):
            log.warning("lost the metadata store at unix://%s; reconnecting", self._path)
            self._tell(SessionState.SUSPENDED)
            self._reconnecting = self._loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        while not self._closed:
            try:
                await self._connect()
            except MetadataConnectionError:
                await asyncio.sleep(RECONNECT_INTERVAL_S)
                continue
            for watch in list(self._watches.values()):
                self._send_quietly("watch", watch.watch_id, watch.kind, watch.path)
            self._tell(SessionState.LOST)  # the old session's ephemerals went with the old connection
            self._tell(SessionState.CONNECTED)
            return

    def _tell(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._loop.call_soon(listener, state)

    # ---- requests ------------------------------------------------------------------

    def _send(self, op: str, *args) -> asyncio.Future:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        conn = self._conn
        if conn is None or conn.transport.is_closing():
            raise MetadataConnectionError(f"not connected to the metadata store at unix://{self._path}")
        request_id = next(self._ids)
        frame = encode([request_id, op, *args])  # BadArgumentsError for an oversized frame, before anything is sent
        future = self._loop.create_future()
        self._pending[request_id] = future
        conn.transport.write(frame)
        return future

    def _send_quietly(self, op: str, *args) -> None:
        """A request nobody awaits (watch registration, cancellation): a failure is logged, never raised later."""
        try:
            future = self._send(op, *args)
        except MetadataError:
            return  # not connected: a reconnect registers the live watches again
        future.add_done_callback(_log_failure)

    async def _call(self, op: str, *args):
        return await self._send(op, *args)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        data, stat = await self._call("get", check_path(path))
        return data, stat_from(stat)

    async def exists(self, path: str) -> Stat | None:
        stat = await self._call("exists", check_path(path))
        return None if stat is None else stat_from(stat)

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        return await self._call("create", check_path(path), bytes(data), bool(ephemeral), bool(sequential),
                                bool(make_parents))

    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        return stat_from(await self._call("set", check_path(path), bytes(data), int(expected_version)))

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self._call("delete", check_path(path), int(expected_version))

    async def children(self, path: str) -> list[str]:
        return await self._call("children", check_path(path))

    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch("data", path, callback)

    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch("children", path, callback)

    def _watch(self, kind: str, path: str, callback: WatchCallback) -> Watch:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        watch = _RemoteWatch(self, next(self._ids), kind, check_path(path), callback)
        self._watches[watch.watch_id] = watch
        self._send_quietly("watch", watch.watch_id, kind, watch.path)
        return watch

    def _forget(self, watch: _RemoteWatch) -> None:
        if self._watches.pop(watch.watch_id, None) is not None and not self._closed:
            self._send_quietly("unwatch", watch.watch_id)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._session_id

    async def expire_session(self) -> None:
        self._session_id = await self._call("expire")
        await asyncio.sleep(0)  # the LOST and CONNECTED listeners were queued before the answer: they have run

    async def close(self) -> None:
        if self._closed:
            return
        self._closing = True
        try:
            await self._call("close")  # answered once the server ended the session: its ephemerals are gone
        except MetadataError:
            pass  # not connected: the session already ended with its connection
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        for watch in self._watches.values():
            watch.cancelled = True
        self._watches.clear()
        if self._conn is not None:
            self._conn.transport.close()
            self._conn = None


def _log_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        exc = future.exception()
        if not isinstance(exc, MetadataConnectionError):
            log.warning("metadata watch request failed: %s", exc)
