"""ZooKeeper metadata store on kazoo: the production backend.

How this works:

* kazoo runs its own threads. Every operation uses kazoo's ``*_async`` call
  and is bridged to an asyncio future with ``call_soon_threadsafe``; connect,
  close and session expiry run kazoo's blocking calls in a worker thread, so
  nothing here blocks the event loop.
* kazoo queues requests made while the connection is down and would wait
  forever, so an operation unanswered within ``operation_timeout_s``
  (default: the session timeout, after which the server would have expired
  us for the same silence) fails with the retriable
  ``MetadataConnectionError``. As with ZooKeeper's own ConnectionLoss, such
  a write may still be applied later: callers re-read before retrying.
* kazoo exceptions are translated into ``storage.errors`` where they enter
  (``_translate``), so callers never see kazoo types.
* ZooKeeper watches are one-shot, and kazoo forgets every watch when the
  connection drops (SUSPENDED) or the session expires (LOST). A ``_ZkWatch``
  re-arms itself after each firing and remembers a *token* of what its last
  arm saw (``mzxid`` of the node for a data watch, ``pzxid`` -- the last
  change to the child set -- for a children watch, -1 for no node). After a
  reconnect every watch re-arms and fires once if its token moved while we
  were away, so nothing that happened during the outage goes unnotified.
  A change landing between a firing and its re-arm needs no event of its
  own: the callback re-reads, and that read follows the re-arm on the
  session, so it sees the change.
* Session states: SUSPENDED (connection lost, the session may survive),
  LOST (expired: its ephemerals are gone). kazoo then opens a new session by
  itself; ``CONNECTED`` follows, and the session id changes.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KzEvent
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

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
    check_path,
)

log = logging.getLogger(__name__)

_ERRORS = (
    (kz.NoNodeError, NoNodeError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, BadVersionError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemeralsError),
    (kz.SessionExpiredError, SessionExpiredError),  # includes ConnectionClosedError
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

_MISSING = -1  # watch token of a node that does not exist
_REARMING = -2  # fired on an existing node: the callback re-reads, but a deletion before the re-arm is news


def _translate(exc: BaseException, what: str) -> MetadataError:
    for kz_type, ours in _ERRORS:
        if isinstance(exc, kz_type):
            return ours(f"{what}: {type(exc).__name__}")
    return MetadataError(f"{what}: {type(exc).__name__}: {exc}")


def _stat(zstat) -> Stat:
    return Stat(zstat.version, zstat.ctime, zstat.mtime, zstat.ephemeralOwner, zstat.numChildren)


def _split_url(hosts_and_chroot: str) -> tuple[str, str]:
    """'h1:2181,h2:2181/chroot' -> ('h1:2181,h2:2181', '/chroot'); no chroot -> ''."""
    hosts, slash, chroot = hosts_and_chroot.partition("/")
    if not hosts:
        raise ValueError(f"zk:// URL needs host:port, got {hosts_and_chroot!r}")
    chroot = "/" + chroot.rstrip("/") if slash and chroot.strip("/") else ""
    return hosts, check_path(chroot) if chroot else ""


def _new_client(hosts: str, session_timeout_s: float, client_id=None) -> KazooClient:
    # Reconnect attempts back off to at most 1 s, so a restarted server is found
    # again well within a session timeout (kazoo's default backs off to an hour).
    retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0)
    return KazooClient(hosts=hosts, timeout=session_timeout_s, client_id=client_id, connection_retry=retry)


def _start(client: KazooClient, timeout_s: float, hosts: str) -> None:
    """Blocking: connect or raise MetadataConnectionError (the client is then released)."""
    try:
        client.start(timeout_s)
    except Exception as exc:  # kazoo raises its handler's plain timeout type when nobody answers
        _stop(client)
        raise MetadataConnectionError(f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g}s: {exc}") from exc


def _stop(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def _ensure_chroot(hosts: str, chroot: str, session_timeout_s: float) -> None:
    client = _new_client(hosts, session_timeout_s)
    _start(client, session_timeout_s, hosts)
    try:
        client.ensure_path(chroot)
    except kz.KazooException as exc:
        raise _translate(exc, f"create chroot {chroot} on {hosts}") from exc
    finally:
        _stop(client)


def _close_session(hosts: str, client_id, session_timeout_s: float) -> None:
    """Join a live session with its id and password, then close it: the server expires it for everyone."""
    twin = _new_client(hosts, session_timeout_s, client_id)
    _start(twin, session_timeout_s, hosts)
    _stop(twin)


def _settle(future: asyncio.Future, result) -> None:
    if future.done():  # timed out meanwhile
        return
    if result.exception is not None:
        future.set_exception(result.exception)
    else:
        future.set_result(result.value)


class _ZkWatch(Watch):
    """A persistent watch built from re-armed one-shot ZooKeeper watches (see the module docstring)."""

    def __init__(self, store: "ZooKeeperStore", path: str, callback: WatchCallback, children: bool):
        self.store, self.path, self.callback, self.children = store, path, callback, children
        self.cancelled = False
        self.token: int | None = None  # None: unknown (not armed yet, or fired and being re-armed)

    def arm(self) -> None:  # event loop
        if self.cancelled or self.store._closed:
            return
        client = self.store._client
        if self.children:
            client.get_children_async(self.path, watch=self._fired, include_data=True).rawlink(self._children_armed)
        else:
            client.exists_async(self.path, watch=self._fired).rawlink(self._data_armed)

    # kazoo thread: answers to arm(). Failures (connection trouble) need nothing: a reconnect re-arms.

    def _data_armed(self, result) -> None:
        if result.exception is None:
            self.store._post(self._observed, _MISSING if result.value is None else result.value.mzxid)

    def _children_armed(self, result) -> None:
        if result.exception is None:
            self.store._post(self._observed, result.value[1].pzxid)
        elif isinstance(result.exception, kz.NoNodeError) and not self.cancelled:
            # A children watch cannot be set on a missing node: watch for its creation instead.
            self.store._client.exists_async(self.path, watch=self._created).rawlink(self._creation_armed)

    def _creation_armed(self, result) -> None:
        if result.exception is None:
            if result.value is None:
                self.store._post(self._observed, _MISSING)
            else:  # created in between: watch its children after all
                self.store._post(self.arm)

    # kazoo thread: watch notifications. Session events (type NONE) are handled by the store.

    def _fired(self, event) -> None:
        if event.type in _EVENTS:
            self.store._post(self._deliver, _EVENTS[event.type])

    def _created(self, event) -> None:
        if event.type == KzEvent.CREATED:
            self.store._post(self._deliver, EventType.CHILDREN_CHANGED)

    # event loop

    def _deliver(self, kind: EventType) -> None:
        if self.cancelled:
            return
        # The callback re-reads, so what the re-arm finds is recorded, not reported -- except a node gone (or
        # back) since this firing: a deletion between a firing and its re-arm fires no watch of its own, and
        # a reader of the children cannot tell "deleted" from a re-read.
        self.token = _MISSING if kind is EventType.DELETED else _REARMING
        self.arm()
        self.callback(WatchEvent(kind, self.path))

    def _observed(self, token: int) -> None:
        before, self.token = self.token, token
        if self.cancelled or before is None or before == token:
            return
        if before == _REARMING and token != _MISSING:
            return
        if token == _MISSING:
            kind = EventType.DELETED
        elif self.children:
            kind = EventType.CHILDREN_CHANGED
        else:
            kind = EventType.CREATED if before == _MISSING else EventType.CHANGED
        self.callback(WatchEvent(kind, self.path))

    def cancel(self) -> None:
        self.cancelled = True
        self.store._watches.discard(self)


class ZooKeeperStore(MetadataStore):
    """One ZooKeeper session. Open with ``open_store('zk://host:port/chroot')``."""

    def __init__(self, client: KazooClient, loop, hosts: str, session_timeout_s: float, operation_timeout_s: float):
        self._client = client
        self._loop = loop
        self._hosts = hosts
        self._session_timeout_s = session_timeout_s
        self._op_timeout_s = operation_timeout_s
        self._listeners: list[SessionListener] = []
        self._watches: set[_ZkWatch] = set()
        self._closed = False
        self._away = False  # SUSPENDED or LOST since the last CONNECTED: watches need re-arming
        self._session_id = client.client_id[0] if client.client_id else 0
        client.add_listener(self._on_state)

    @classmethod
    async def open(
        cls, hosts_and_chroot: str, *, session_timeout_s: float = 10.0, operation_timeout_s: float | None = None
    ) -> "ZooKeeperStore":
        """Connect to ``host:port[,host:port][/chroot]``, creating the chroot if missing.

        Raises MetadataConnectionError when no server answers within the session timeout.
        """
        hosts, chroot = _split_url(hosts_and_chroot)
        if chroot:
            await asyncio.to_thread(_ensure_chroot, hosts, chroot, session_timeout_s)
        client = _new_client(hosts + chroot, session_timeout_s)
        await asyncio.to_thread(_start, client, session_timeout_s, hosts)
        loop = asyncio.get_running_loop()
        return cls(client, loop, hosts, session_timeout_s, operation_timeout_s or session_timeout_s)

    # ---- bridging ------------------------------------------------------------

    def _post(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the store's loop; callable from any thread."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: nobody is left to tell
            pass

    async def _call(self, what: str, start):
        if self._closed:
            raise SessionExpiredError(f"{what}: this metadata store session is closed")
        future = self._loop.create_future()
        start().rawlink(lambda result: self._post(_settle, future, result))
        try:
            return await asyncio.wait_for(future, self._op_timeout_s)
        except TimeoutError as exc:
            raise MetadataConnectionError(
                f"{what}: no answer from ZooKeeper within {self._op_timeout_s:g}s"
            ) from exc
        except kz.KazooException as exc:
            raise _translate(exc, what) from exc

    # ---- operations ----------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, Stat]:
        check_path(path)
        data, zstat = await self._call(f"get {path}", lambda: self._client.get_async(path))
        return data, _stat(zstat)

    async def exists(self, path: str) -> Stat | None:
        check_path(path)
        zstat = await self._call(f"exists {path}", lambda: self._client.exists_async(path))
        return None if zstat is None else _stat(zstat)

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        check_path(path)
        data = bytes(data)
        return await self._call(
            f"create {path}",
            lambda: self._client.create_async(path, data, ephemeral=ephemeral, sequence=sequential, makepath=make_parents),
        )

    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        check_path(path)
        data = bytes(data)
        zstat = await self._call(f"set {path}", lambda: self._client.set_async(path, data, expected_version))
        return _stat(zstat)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        check_path(path)
        await self._call(f"delete {path}", lambda: self._client.delete_async(path, expected_version))

    async def children(self, path: str) -> list[str]:
        check_path(path)
        return sorted(await self._call(f"children {path}", lambda: self._client.get_children_async(path)))

    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(path, callback, children=False)

    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(path, callback, children=True)

    def _watch(self, path: str, callback: WatchCallback, children: bool) -> Watch:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        handle = _ZkWatch(self, check_path(path), callback, children)
        self._watches.add(handle)
        handle.arm()
        return handle

    # ---- session -------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._session_id

    def _on_state(self, state: KazooState) -> None:  # kazoo thread; must not block
        self._post(self._state_changed, state)

    def _state_changed(self, state: KazooState) -> None:
        if self._closed:
            return
        if state == KazooState.CONNECTED:
            client_id = self._client.client_id
            if client_id:
                self._session_id = client_id[0]
            if self._away:
                self._away = False
                for handle in list(self._watches):
                    handle.arm()
            ours = SessionState.CONNECTED
        else:
            self._away = True
            ours = SessionState.LOST if state == KazooState.LOST else SessionState.SUSPENDED
        log.info("ZooKeeper session 0x%x on %s: %s", self._session_id, self._hosts, ours.value)
        for listener in list(self._listeners):
            self._loop.call_soon(listener, ours)  # one failing listener must not silence the rest

    async def expire_session(self) -> None:
        """Expire the session the classic way: a twin client joins it with its id and password, then closes it.

        Returns once this store is CONNECTED on a new session. Raises MetadataConnectionError
        if that does not happen within three session timeouts.
        """
        client_id = self._client.client_id
        if self._closed or client_id is None:
            raise SessionExpiredError("this metadata store has no live session to expire")
        renewed = asyncio.Event()
        lost = False

        def follow(state: SessionState) -> None:
            nonlocal lost
            lost = lost or state is SessionState.LOST
            if lost and state is SessionState.CONNECTED:
                renewed.set()

        self._listeners.append(follow)  # last, so every other listener has heard CONNECTED first
        deadline_s = max(3 * self._session_timeout_s, 10.0)
        try:
            await asyncio.to_thread(_close_session, self._hosts, client_id, self._session_timeout_s)
            await asyncio.wait_for(renewed.wait(), deadline_s)
        except TimeoutError as exc:
            raise MetadataConnectionError(f"session 0x{client_id[0]:x} was not renewed within {deadline_s:g}s") from exc
        finally:
            self._listeners.remove(follow)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in list(self._watches):
            handle.cancel()
        await asyncio.to_thread(_stop, self._client)
