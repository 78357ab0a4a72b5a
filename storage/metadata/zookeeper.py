"""ZooKeeper metadata store on kazoo: the production backend.

How this works:

* kazoo runs its own threads. Every operation uses kazoo's ``*_async`` call
  and is bridged to an asyncio future with ``call_soon_threadsafe``; nothing
  here blocks the event loop except ``open`` (connect) and ``close``, which
  run kazoo's blocking calls in a worker thread.
* kazoo exceptions are translated into ``storage.errors`` where they enter
  (``_translate``), so callers never see kazoo types.
* ZooKeeper watches are one-shot and kazoo 2.11 has no persistent watches,
  so a watch handle re-arms itself each time it fires. A change that lands
  between the firing and the re-arm is coalesced into the next notification,
  which the interface allows: callbacks re-read the state they care about.
* Session events: SUSPENDED (connection lost, session may survive), LOST
  (expired: ephemerals gone). kazoo then opens a new session by itself; when
  it is CONNECTED again every watch is re-armed (the server forgot them) and
  fired once, because changes made while we were away went unseen.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KzEvent
from kazoo.protocol.states import KazooState

from storage.errors import (
    BadArgumentsError,
    BadVersionError,
    MetadataConnectionError,
    MetadataError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
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
)

log = logging.getLogger(__name__)

_ERRORS = (
    (kz.NoNodeError, NoNodeError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, BadVersionError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemeralsError),
    (kz.SessionExpiredError, SessionExpiredError),
    (kz.ConnectionClosedError, SessionExpiredError),
    (kz.ConnectionLoss, MetadataConnectionError),
    (kz.OperationTimeoutError, MetadataConnectionError),
    (kz.BadArgumentsError, BadArgumentsError),
)

_EVENTS = {
    KzEvent.CREATED: EventType.CREATED,
    KzEvent.CHANGED: EventType.CHANGED,
    KzEvent.DELETED: EventType.DELETED,
    KzEvent.CHILD: EventType.CHILDREN_CHANGED,
}


def _translate(exc: BaseException, what: str) -> MetadataError:
    for kz_type, ours in _ERRORS:
        if isinstance(exc, kz_type):
            return ours(f"{what}: {type(exc).__name__}")
    return MetadataError(f"{what}: {type(exc).__name__}: {exc}")


def _stat(zstat) -> Stat:
    return Stat(zstat.version, zstat.ctime, zstat.mtime, zstat.ephemeralOwner, zstat.numChildren)


def _split_url(hosts_and_chroot: str) -> tuple[str, str]:
    hosts, slash, chroot = hosts_and_chroot.partition("/")
    if not hosts:
        raise ValueError(f"zk:// URL needs host:port, got {hosts_and_chroot!r}")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class _ZkWatch(Watch):
    """A persistent watch built from re-armed one-shot ZooKeeper watches.

    Re-arming is itself a read (exists / get_children) that sets the next
    watch. A change made by *another* session between the firing and the
    re-arm would go unseen, so the re-arm's answer is compared with the last
    known existence of the node: a node that appeared or vanished meanwhile
    produces the missed CREATED / DELETED. Data changes in that gap need no
    event: the owner re-reads after every notification through this session,
    and ZooKeeper orders one session's requests, so its read follows the
    re-arm and sees them.
    """

    def __init__(self, store: "ZooKeeperStore", path: str, callback: WatchCallback, children: bool):
        self.store, self.path, self.callback, self.children = store, path, callback, children
        self.cancelled = False
        self.known_exists: bool | None = None  # unknown until the first arm answers

    def arm(self) -> None:
        if self.cancelled or self.store._closed:
            return
        client = self.store._client
        if self.children:
            client.get_children_async(self.path, watch=self._fired).rawlink(self._children_armed)
        else:
            client.exists_async(self.path, watch=self._fired).rawlink(self._data_armed)

    def _data_armed(self, result) -> None:  # kazoo thread
        if result.exception is None:
            self.store._post(self._observed, result.value is not None)

    def _children_armed(self, result) -> None:  # kazoo thread
        if isinstance(result.exception, kz.NoNodeError) and not self.cancelled:
            # A children watch cannot be set on a missing node: wait for its creation instead.
            self.store._client.exists_async(self.path, watch=self._fired)
            self.store._post(self._observed, False)
        elif result.exception is None:
            self.store._post(self._observed, True)

    def _observed(self, exists: bool) -> None:  # event loop
        before, self.known_exists = self.known_exists, exists
        if self.cancelled or before is None or before == exists:
            return
        if exists:
            self.callback(WatchEvent(EventType.CHILDREN_CHANGED if self.children else EventType.CREATED, self.path))
        else:
            self.callback(WatchEvent(EventType.DELETED, self.path))

    def _fired(self, event) -> None:  # kazoo thread
        if event.type in _EVENTS:
            self.store._post(self._deliver, _EVENTS[event.type])

    def _deliver(self, kind: EventType) -> None:  # event loop
        if self.cancelled:
            return
        self.known_exists = kind is not EventType.DELETED
        self.arm()
        if self.children and kind is EventType.CREATED:
            kind = EventType.CHILDREN_CHANGED
        if self.children and kind is EventType.CHANGED:
            return  # the exists-watch used while the node was missing also reports data changes
        self.callback(WatchEvent(kind, self.path))

    def cancel(self) -> None:
        self.cancelled = True
        self.store._watches.discard(self)


class ZooKeeperStore(MetadataStore):
    """One ZooKeeper session. Open with ``open_store('zk://host:port/chroot')``."""

    def __init__(self, client: KazooClient, loop: asyncio.AbstractEventLoop, hosts: str, chroot: str):
        self._client = client
        self._loop = loop
        self._hosts = hosts
        self._chroot = chroot
        self._listeners: list[SessionListener] = []
        self._watches: set[_ZkWatch] = set()
        self._closed = False
        self._lost = False
        self._session_id = client.client_id[0] if client.client_id else 0
        client.add_listener(self._on_state)

    @classmethod
    async def open(cls, hosts_and_chroot: str, *, session_timeout_s: float = 10.0) -> "ZooKeeperStore":
        hosts, chroot = _split_url(hosts_and_chroot)
        loop = asyncio.get_running_loop()
        if chroot:
            await asyncio.to_thread(_ensure_chroot, hosts, chroot, session_timeout_s)
        client = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s)
        try:
            await asyncio.to_thread(client.start, max(session_timeout_s, 5.0))
        except Exception as exc:
            await asyncio.to_thread(client.close)
            raise MetadataConnectionError(f"cannot connect to ZooKeeper at {hosts}: {exc}") from exc
        return cls(client, loop, hosts, chroot)

    # ---- bridging ------------------------------------------------------------

    def _post(self, fn, *args) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    async def _call(self, what: str, start):
        if self._closed:
            raise SessionExpiredError(f"{what}: this metadata store session is closed")
        future = self._loop.create_future()

        def done(result) -> None:  # kazoo thread
            self._post(_settle, future, result)

        try:
            start().rawlink(done)
        except Exception as exc:  # argument validation happens synchronously in kazoo
            raise _translate(exc, what) from exc
        try:
            return await future
        except MetadataError:
            raise
        except Exception as exc:
            raise _translate(exc, what) from exc

    # ---- operations ----------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, Stat]:
        data, zstat = await self._call(f"get {path}", lambda: self._client.get_async(path))
        return data, _stat(zstat)

    async def exists(self, path: str) -> Stat | None:
        zstat = await self._call(f"exists {path}", lambda: self._client.exists_async(path))
        return None if zstat is None else _stat(zstat)

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        return await self._call(
            f"create {path}",
            lambda: self._client.create_async(
                path, bytes(data), ephemeral=ephemeral, sequence=sequential, makepath=make_parents
            ),
        )

    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        zstat = await self._call(f"set {path}", lambda: self._client.set_async(path, bytes(data), expected_version))
        return _stat(zstat)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self._call(f"delete {path}", lambda: self._client.delete_async(path, expected_version))

    async def children(self, path: str) -> list[str]:
        return sorted(await self._call(f"children {path}", lambda: self._client.get_children_async(path)))

    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(path, callback, children=False)

    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(path, callback, children=True)

    def _watch(self, path: str, callback: WatchCallback, children: bool) -> Watch:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        handle = _ZkWatch(self, path, callback, children)
        self._watches.add(handle)
        handle.arm()
        return handle

    # ---- session -------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._session_id

    def _on_state(self, state) -> None:  # kazoo thread; must not block
        self._post(self._state_changed, state)

    def _state_changed(self, state) -> None:
        if self._closed:
            return
        if state == KazooState.LOST:
            self._lost = True
            ours = SessionState.LOST
        elif state == KazooState.SUSPENDED:
            ours = SessionState.SUSPENDED
        else:
            ours = SessionState.CONNECTED
            client_id = self._client.client_id
            self._session_id = client_id[0] if client_id else self._session_id
            if self._lost:
                self._lost = False
                self._rearm_all()
        for listener in list(self._listeners):
            listener(ours)

    def _rearm_all(self) -> None:
        for handle in list(self._watches):
            handle.arm()
            handle.callback(WatchEvent(EventType.CHILDREN_CHANGED if handle.children else EventType.CHANGED, handle.path))

    async def expire_session(self) -> None:
        """Expire the session the classic way: a second client joins it with its id and password, then closes."""
        old = self._session_id
        reconnected = asyncio.Event()
        saw_lost = False

        def watch(state: SessionState) -> None:
            nonlocal saw_lost
            saw_lost = saw_lost or state is SessionState.LOST
            if saw_lost and state is SessionState.CONNECTED and self._session_id != old:
                reconnected.set()

        self.add_session_listener(watch)
        try:
            await asyncio.to_thread(_close_session, self._hosts, self._client.client_id)
            # The server tells us only when we next talk to it: poke until it does.
            while not reconnected.is_set():
                try:
                    await asyncio.wait_for(self.exists("/"), 1.0)
                except (MetadataError, asyncio.TimeoutError):
                    pass
                try:
                    await asyncio.wait_for(reconnected.wait(), 0.2)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._listeners.remove(watch)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in list(self._watches):
            handle.cancel()
        client = self._client
        await asyncio.to_thread(lambda: (client.stop(), client.close()))


def _settle(future: asyncio.Future, result) -> None:
    if future.done():
        return
    if result.exception is not None:
        future.set_exception(result.exception)
    else:
        future.set_result(result.value)


def _ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    client = KazooClient(hosts=hosts, timeout=timeout_s)
    try:
        client.start(max(timeout_s, 5.0))
        client.ensure_path(chroot)
    except kz.KazooException as exc:
        raise MetadataConnectionError(f"cannot create chroot {chroot} on ZooKeeper {hosts}: {exc}") from exc
    except Exception as exc:  # kazoo raises a plain timeout error when it cannot connect
        raise MetadataConnectionError(f"cannot connect to ZooKeeper at {hosts}: {exc}") from exc
    finally:
        client.stop()
        client.close()


def _close_session(hosts: str, client_id) -> None:
    twin = KazooClient(hosts=hosts, client_id=client_id)
    twin.start(10)
    twin.stop()
    twin.close()
