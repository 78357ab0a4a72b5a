"""Embedded metadata store: ZooKeeper's semantics in-process, optionally persisted to a directory.

How this works:

* A ``_Tree`` holds the nodes. Every ``EmbeddedStore`` is one *session* on a
  tree; stores opened with the same ``memory://name`` (or the same
  ``file://DIR``) in one process share the tree, so standalone mode can run
  three bookies and a broker with separate sessions, exactly as they would
  against one ZooKeeper.
* Mutations are applied synchronously under the event loop (there is no
  network between a session and its tree), then watchers are notified with
  ``loop.call_soon`` -- never from inside the mutating call, as ZooKeeper
  delivers watch events after the operation completes.
* Sessions end only by ``close()`` or ``expire_session()``: with no network
  between them, a live owner cannot be partitioned from its tree.
* ``file://DIR`` writes every change to a persistent node through to SQLite
  (``DIR/metadata.sqlite``) in one transaction with ``synchronous=FULL``:
  a bookie acknowledges entries only after fsync, so the metadata naming those
  entries must be at least as durable. Metadata writes are rare (ledger
  create/close, cursor snapshots), so the fsync per write is affordable.
  Ephemeral nodes are never persisted; sequence counters are. An exclusive
  ``flock`` on ``DIR/LOCK`` keeps a second process out.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import sqlite3
import time
from pathlib import Path

from storage.errors import (
    BadArgumentsError,
    BadVersionError,
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

_session_ids = itertools.count(1)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _valid(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise BadArgumentsError(f"invalid metadata path {path!r}: must be absolute, with no empty or trailing components")
    return path


def _split(path: str) -> tuple[str, str]:
    """'/a/b' -> ('/a', 'b'). Raises BadArgumentsError for an invalid path or the root."""
    if _valid(path) == "/":
        raise BadArgumentsError("the root node cannot be created or deleted")
    parent, _, name = path.rpartition("/")
    return parent or "/", name


class _Node:
    __slots__ = ("data", "version", "ctime", "mtime", "owner", "children", "cversion")

    def __init__(self, data: bytes, owner: int, ctime: int, version: int = 0, mtime: int | None = None, cversion: int = 0):
        self.data = data
        self.version = version
        self.ctime = ctime
        self.mtime = ctime if mtime is None else mtime
        self.owner = owner
        self.children: dict[str, _Node] = {}
        self.cversion = cversion

    def stat(self) -> Stat:
        return Stat(self.version, self.ctime, self.mtime, self.owner, len(self.children))


class _WatchHandle(Watch):
    def __init__(self, table: dict, path: str, callback: WatchCallback, loop: asyncio.AbstractEventLoop):
        self._table, self.path, self._callback, self._loop = table, path, callback, loop
        self.cancelled = False
        table.setdefault(path, set()).add(self)

    def fire(self, event: WatchEvent) -> None:
        if not self.cancelled and not self._loop.is_closed():
            self._loop.call_soon(self._deliver, event)

    def _deliver(self, event: WatchEvent) -> None:
        if not self.cancelled:
            self._callback(event)

    def cancel(self) -> None:
        self.cancelled = True
        handles = self._table.get(self.path)
        if handles is not None:
            handles.discard(self)
            if not handles:
                del self._table[self.path]


class _SqliteLog:
    """Write-through persistence of persistent nodes for file://DIR."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            raise MetadataError(
                f"metadata directory {directory} is in use by another process (lock {directory / 'LOCK'} is held)"
            ) from exc
        self._db = sqlite3.connect(directory / "metadata.sqlite", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, data BLOB, version INTEGER,"
            " ctime INTEGER, mtime INTEGER, cversion INTEGER)"
        )

    def load(self) -> list[tuple]:
        return self._db.execute("SELECT path, data, version, ctime, mtime, cversion FROM nodes").fetchall()

    def write(self, upserts: list[tuple[str, _Node]], deletes: list[str]) -> None:
        with self._db:  # one transaction
            self._db.execute("BEGIN")
            for path in deletes:
                self._db.execute("DELETE FROM nodes WHERE path = ?", (path,))
            for path, n in upserts:
                self._db.execute(
                    "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?)",
                    (path, n.data, n.version, n.ctime, n.mtime, n.cversion),
                )

    def close(self) -> None:
        self._db.close()
        os.close(self._lock_fd)


class _Tree:
    def __init__(self, key: str, log: _SqliteLog | None):
        self.key = key
        self.log = log
        self.root = _Node(b"", 0, _now_ms())
        self.sessions: set[EmbeddedStore] = set()
        self.data_watches: dict[str, set[_WatchHandle]] = {}
        self.child_watches: dict[str, set[_WatchHandle]] = {}
        if log is not None:
            for path, data, version, ctime, mtime, cversion in sorted(log.load(), key=lambda r: r[0].count("/")):
                parent, name = _split(path)
                self.node(parent).children[name] = _Node(data, 0, ctime, version, mtime, cversion)

    def node(self, path: str) -> _Node:
        if _valid(path) == "/":
            return self.root
        current = self.root
        for part in path[1:].split("/"):
            current = current.children.get(part)
            if current is None:
                raise NoNodeError(f"no node {path}")
        return current

    def find(self, path: str) -> _Node | None:
        try:
            return self.node(path)
        except NoNodeError:
            return None

    def notify(self, events: list[WatchEvent]) -> None:
        for event in events:
            table = self.child_watches if event.type is EventType.CHILDREN_CHANGED else self.data_watches
            for handle in list(table.get(event.path, ())):
                handle.fire(event)
            if event.type is EventType.DELETED:  # a deleted node's children watchers hear of it too
                for handle in list(self.child_watches.get(event.path, ())):
                    handle.fire(event)

    def persist(self, upserts: list[tuple[str, _Node]], deletes: list[str] = ()) -> None:
        if self.log is not None:
            self.log.write([(p, n) for p, n in upserts if n.owner == 0], list(deletes))

    # ---- mutations (synchronous, raising storage.errors) --------------------

    def create(self, path: str, data: bytes, owner: int, sequential: bool, make_parents: bool) -> str:
        parent_path, name = _split(path)
        events: list[WatchEvent] = []
        upserts: list[tuple[str, _Node]] = []
        if make_parents and self.find(parent_path) is None:
            self._create_ancestors(parent_path, events, upserts)
        parent = self.node(parent_path)
        if parent.owner:
            raise NoChildrenForEphemeralsError(f"cannot create {path}: parent {parent_path} is ephemeral")
        if sequential:
            name = f"{name}{parent.cversion:010d}"
            path = f"{'' if parent_path == '/' else parent_path}/{name}"
        if name in parent.children:
            raise NodeExistsError(f"node {path} already exists")
        now = _now_ms()
        node = _Node(bytes(data), owner, now)
        parent.children[name] = node
        parent.cversion += 1
        upserts += [(path, node)] + ([(parent_path, parent)] if parent_path != "/" else [])
        self.persist(upserts)
        events += [WatchEvent(EventType.CREATED, path), WatchEvent(EventType.CHILDREN_CHANGED, parent_path)]
        self.notify(events)
        return path

    def _create_ancestors(self, path: str, events: list, upserts: list) -> None:
        current = ""
        for part in path[1:].split("/"):
            parent_path = current or "/"
            current = f"{current}/{part}"
            parent = self.node(parent_path)
            if part in parent.children:
                continue
            if parent.owner:
                raise NoChildrenForEphemeralsError(f"cannot create {current}: parent {parent_path} is ephemeral")
            node = _Node(b"", 0, _now_ms())
            parent.children[part] = node
            parent.cversion += 1
            upserts += [(current, node)] + ([(parent_path, parent)] if parent_path != "/" else [])
            events += [WatchEvent(EventType.CREATED, current), WatchEvent(EventType.CHILDREN_CHANGED, parent_path)]

    def set(self, path: str, data: bytes, expected_version: int) -> Stat:
        node = self.node(path)
        if expected_version != ANY_VERSION and expected_version != node.version:
            raise BadVersionError(f"set {path}: expected version {expected_version}, node is at {node.version}")
        node.data = bytes(data)
        node.version += 1
        node.mtime = _now_ms()
        self.persist([(path, node)])
        self.notify([WatchEvent(EventType.CHANGED, path)])
        return node.stat()

    def delete(self, path: str, expected_version: int) -> None:
        parent_path, name = _split(path)
        node = self.node(path)
        if expected_version != ANY_VERSION and expected_version != node.version:
            raise BadVersionError(f"delete {path}: expected version {expected_version}, node is at {node.version}")
        if node.children:
            raise NotEmptyError(f"cannot delete {path}: it has {len(node.children)} children")
        parent = self.node(parent_path)
        del parent.children[name]
        parent.cversion += 1
        self.persist([(parent_path, parent)] if parent_path != "/" else [], [path])
        self.notify([WatchEvent(EventType.DELETED, path), WatchEvent(EventType.CHILDREN_CHANGED, parent_path)])

    def ephemerals_of(self, owner: int) -> list[str]:
        found: list[str] = []

        def walk(prefix: str, node: _Node) -> None:
            for name, child in node.children.items():
                path = f"{prefix}/{name}"
                if child.owner == owner:
                    found.append(path)
                walk(path, child)

        walk("", self.root)
        return found


_trees: dict[str, _Tree] = {}


class EmbeddedStore(MetadataStore):
    """One session on an embedded tree. Open with ``open_store('memory://...')`` or ``'file://...'``."""

    def __init__(self, tree: _Tree, loop: asyncio.AbstractEventLoop):
        self._tree = tree
        self._loop = loop
        self._session_id = next(_session_ids)
        self._listeners: list[SessionListener] = []
        self._watches: set[_WatchHandle] = set()
        self._closed = False
        tree.sessions.add(self)

    @classmethod
    async def open_memory(cls, name: str, *, session_timeout_s: float = 10.0) -> "EmbeddedStore":
        key = f"memory://{name}"
        tree = _trees.get(key)
        if tree is None:
            tree = _trees[key] = _Tree(key, None)
        return cls(tree, asyncio.get_running_loop())

    @classmethod
    async def open_file(cls, directory: str, *, session_timeout_s: float = 10.0) -> "EmbeddedStore":
        if not directory:
            raise ValueError("file:// metadata store URL needs a directory, e.g. file://./data/metadata")
        path = Path(directory).expanduser().resolve()
        key = f"file://{path}"
        tree = _trees.get(key)
        if tree is None:
            tree = _trees[key] = _Tree(key, _SqliteLog(path))
        return cls(tree, asyncio.get_running_loop())

    def _check(self) -> _Tree:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        return self._tree

    async def get(self, path: str) -> tuple[bytes, Stat]:
        node = self._check().node(path)
        return node.data, node.stat()

    async def exists(self, path: str) -> Stat | None:
        node = self._check().find(path)
        return None if node is None else node.stat()

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        return self._check().create(path, data, self._session_id if ephemeral else 0, sequential, make_parents)

    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        return self._check().set(path, data, expected_version)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        self._check().delete(path, expected_version)

    async def children(self, path: str) -> list[str]:
        return sorted(self._check().node(path).children)

    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        handle = _WatchHandle(self._check().data_watches, path, callback, self._loop)
        self._watches.add(handle)
        return handle

    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        handle = _WatchHandle(self._check().child_watches, path, callback, self._loop)
        self._watches.add(handle)
        return handle

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._session_id

    def _drop_ephemerals(self) -> None:
        tree = self._tree
        for path in sorted(tree.ephemerals_of(self._session_id), key=len, reverse=True):
            try:
                tree.delete(path, ANY_VERSION)
            except (NoNodeError, NotEmptyError):
                pass

    def _tell(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._loop.call_soon(listener, state)

    async def expire_session(self) -> None:
        self._check()
        self._drop_ephemerals()
        self._tell(SessionState.LOST)
        self._session_id = next(_session_ids)
        self._tell(SessionState.CONNECTED)
        await asyncio.sleep(0)  # let LOST/CONNECTED reach listeners before the caller continues

    async def close(self) -> None:
        if self._closed:
            return
        self._drop_ephemerals()
        for handle in self._watches:
            handle.cancel()
        self._closed = True
        tree = self._tree
        tree.sessions.discard(self)
        if not tree.sessions and tree.log is not None:
            # Last session on a persisted tree: release the directory so another process (or a
            # later open in this one) loads it fresh from disk.
            tree.log.close()
            _trees.pop(tree.key, None)
