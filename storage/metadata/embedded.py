"""Embedded metadata store: ZooKeeper's semantics in-process, optionally persisted to a directory.

How this works:

* A ``_Tree`` holds the nodes. Every ``EmbeddedStore`` is one *session* on a
  tree; stores opened with the same ``memory://name`` (or the same
  ``file://DIR``) in one process share the tree, so standalone mode can run
  three bookies and a broker with separate sessions, exactly as they would
  against one ZooKeeper. A tree belongs to the one event-loop thread that
  uses it; it has no locks.
* Each mutation runs in four steps: check everything (raising before any
  change), persist the new rows, apply them in memory, then notify watchers
  with ``loop.call_soon`` -- never from inside the mutating call, as
  ZooKeeper delivers watch events after the operation completes. A failed
  disk write therefore leaves memory as it was.
* Sequential names come from the parent's count of child *creations*
  (ZooKeeper's internal ``cversion``; deletions do not advance it), so a
  sequence number is never handed out twice under one parent, and the
  numbers match what a real ZooKeeper would assign.
* Sessions end only by ``close()`` or ``expire_session()``: with no network
  between a session and its tree, a live owner cannot be partitioned from
  it, so ``session_timeout_s`` has nothing to time out and is ignored.
* ``file://DIR`` writes every change to a persistent node (and its parent's
  creation counter) through to SQLite (``DIR/metadata.sqlite``) in one
  transaction with ``synchronous=FULL``: in WAL mode ``NORMAL`` may lose the
  last commits on power failure, and a bookie acknowledges entries only
  after fsync, so the metadata naming those entries (ledger closed, cursor
  moved) must be at least as durable. Metadata writes are rare, so one WAL
  fsync per write is affordable, and it is done inline on the loop because
  ordering with the in-memory tree matters more than the ~1 ms it blocks.
  Ephemeral nodes are never persisted. An exclusive ``flock`` on
  ``DIR/LOCK`` keeps a second process out.
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
    check_path,
    join,
)

_session_ids = itertools.count(1)

# One row per persistent node: (path, data, version, ctime, mtime, cversion).
Row = tuple[str, bytes, int, int, int, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _parent(path: str) -> str:
    return path.rpartition("/")[0] or "/"


def _split(path: str) -> tuple[str, str]:
    """'/a/b' -> ('/a', 'b'). Raises BadArgumentsError for an invalid path or the root."""
    if check_path(path) == "/":
        raise BadArgumentsError("the root node cannot be created or deleted")
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _check_version(op: str, path: str, expected: int, actual: int) -> None:
    if expected != ANY_VERSION and expected != actual:
        raise BadVersionError(f"{op} {path}: expected version {expected}, node is at {actual}")


class _Node:
    __slots__ = ("data", "version", "ctime", "mtime", "owner", "cversion", "children")

    def __init__(self, data: bytes, owner: int, ctime: int, version=0, mtime=None, cversion=0):
        self.data = data
        self.version = version
        self.ctime = ctime
        self.mtime = ctime if mtime is None else mtime
        self.owner = owner  # session id for an ephemeral node, 0 for a persistent one
        self.cversion = cversion  # children ever created here: the next sequence number
        self.children: dict[str, _Node] = {}

    def stat(self) -> Stat:
        return Stat(self.version, self.ctime, self.mtime, self.owner, len(self.children))

    def row(self, path: str, *, data=None, version=None, mtime=None, cversion=None) -> Row:
        """This node's persisted row, with the given fields as they will be after the change."""
        return (
            path,
            self.data if data is None else data,
            self.version if version is None else version,
            self.ctime,
            self.mtime if mtime is None else mtime,
            self.cversion if cversion is None else cversion,
        )


class _WatchHandle(Watch):
    def __init__(self, table: dict, path: str, callback: WatchCallback, loop: asyncio.AbstractEventLoop):
        self._table, self.path, self._callback, self._loop = table, path, callback, loop
        self.cancelled = False
        table.setdefault(path, set()).add(self)

    def fire(self, event: WatchEvent) -> None:
        if not self.cancelled and not self._loop.is_closed():
            self._loop.call_soon(self._deliver, event)

    def _deliver(self, event: WatchEvent) -> None:
        if not self.cancelled:  # cancelled between the change and this delivery
            self._callback(event)

    def cancel(self) -> None:
        self.cancelled = True
        handles = self._table.get(self.path)
        if handles is not None:
            handles.discard(self)
            if not handles:
                del self._table[self.path]


class _SqliteLog:
    """Write-through persistence of persistent nodes for file://DIR, owned by one process at a time."""

    SCHEMA_VERSION = 1

    def __init__(self, directory: Path):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise MetadataError(f"cannot open metadata directory {directory}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._lock_fd)
            raise MetadataError(
                f"metadata directory {directory} is in use by another process (pid {holder} holds "
                f"{directory / 'LOCK'}); stop it, or point this one at another directory"
            ) from exc
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
        try:
            self._db = sqlite3.connect(directory / "metadata.sqlite", isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # why FULL: see the module docstring
            schema = self._db.execute("PRAGMA user_version").fetchone()[0]
            if schema not in (0, self.SCHEMA_VERSION):
                raise MetadataError(
                    f"{directory / 'metadata.sqlite'} has schema version {schema}; "
                    f"this build reads version {self.SCHEMA_VERSION}"
                )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, data BLOB NOT NULL,"
                " version INTEGER NOT NULL, ctime INTEGER NOT NULL, mtime INTEGER NOT NULL,"
                " cversion INTEGER NOT NULL)"
            )
            self._db.execute(f"PRAGMA user_version={self.SCHEMA_VERSION}")
        except (sqlite3.Error, MetadataError) as exc:
            os.close(self._lock_fd)
            if isinstance(exc, MetadataError):
                raise
            raise MetadataError(f"cannot open {directory / 'metadata.sqlite'}: {exc}") from exc

    def load(self) -> list[Row]:
        return self._db.execute("SELECT path, data, version, ctime, mtime, cversion FROM nodes").fetchall()

    def write(self, upserts: list[Row], deletes: list[str]) -> None:
        """Apply one mutation's rows in one transaction. Raises MetadataError (and writes nothing)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM nodes WHERE path = ?", [(p,) for p in deletes])
                self._db.executemany("INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?)", upserts)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite ends it itself on some errors (a full disk, I/O)
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot persist metadata change: {exc}") from exc

    def close(self) -> None:
        self._db.close()
        os.close(self._lock_fd)


class _Tree:
    """The nodes, their watchers and the ephemerals of every session; mutations raise storage.errors."""

    def __init__(self, key: str, disk: _SqliteLog | None):
        self.key = key
        self.disk = disk
        self.root = _Node(b"", 0, _now_ms())
        self.sessions: set[EmbeddedStore] = set()
        self.ephemerals: dict[int, set[str]] = {}
        self.data_watches: dict[str, set[_WatchHandle]] = {}
        self.child_watches: dict[str, set[_WatchHandle]] = {}
        if disk is not None:
            self._load(disk.load())

    def _load(self, rows: list[Row]) -> None:
        for path, data, version, ctime, mtime, cversion in sorted(rows, key=lambda r: r[0].count("/")):
            node = _Node(bytes(data), 0, ctime, version, mtime, cversion)
            if path == "/":
                node.children = self.root.children
                self.root = node
                continue
            parent_path, name = _split(path)
            parent = self.find(parent_path)
            if parent is None:
                raise MetadataError(f"{self.key}: persisted node {path} has no parent; the store is corrupt")
            parent.children[name] = node

    # ---- reads ---------------------------------------------------------------

    def node(self, path: str) -> _Node:
        current = self.root
        if check_path(path) == "/":
            return current
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

    # ---- mutations: check, persist, apply, notify ----------------------------

    def create(self, path: str, data: bytes, owner: int, sequential: bool, make_parents: bool) -> str:
        parent_path, name = _split(path)
        data = bytes(data)
        missing = self._missing_ancestors(parent_path) if make_parents else []
        anchor_path = _parent(missing[0]) if missing else parent_path
        anchor = self.node(anchor_path)  # NoNodeError: missing parent without make_parents
        if sequential:
            name += f"{0 if missing else anchor.cversion:010d}"
            path = join(parent_path, name)
        if not missing and name in anchor.children:
            raise NodeExistsError(f"node {path} already exists")
        if anchor.owner:
            raise NoChildrenForEphemeralsError(f"cannot create {path}: {anchor_path} is ephemeral")
        now = _now_ms()
        chain = [(p, _Node(b"", 0, now, cversion=1)) for p in missing]  # each gets one child
        node = _Node(data, owner, now)
        upserts = [anchor.row(anchor_path, cversion=anchor.cversion + 1)] + [n.row(p) for p, n in chain]
        if not owner:
            upserts.append(node.row(path))
        self.persist(upserts)

        anchor.cversion += 1
        parent = anchor
        for p, n in chain:
            parent.children[p.rpartition("/")[2]] = n
            parent = n
        parent.children[name] = node
        if owner:
            self.ephemerals.setdefault(owner, set()).add(path)
        events = []
        for p in [p for p, _ in chain] + [path]:
            events += [WatchEvent(EventType.CREATED, p), WatchEvent(EventType.CHILDREN_CHANGED, _parent(p))]
        self.notify(events)
        return path

    def _missing_ancestors(self, path: str) -> list[str]:
        """The ancestors of a node-to-be (``path`` included) that do not exist, shallowest first."""
        missing = []
        while path != "/" and self.find(path) is None:
            missing.append(path)
            path = _parent(path)
        return missing[::-1]

    def set(self, path: str, data: bytes, expected_version: int) -> Stat:
        node = self.node(path)
        _check_version("set", path, expected_version, node.version)
        data, now = bytes(data), _now_ms()
        if not node.owner:
            self.persist([node.row(path, data=data, version=node.version + 1, mtime=now)])
        node.data, node.version, node.mtime = data, node.version + 1, now
        self.notify([WatchEvent(EventType.CHANGED, path)])
        return node.stat()

    def delete(self, path: str, expected_version: int) -> None:
        parent_path, name = _split(path)
        node = self.node(path)
        _check_version("delete", path, expected_version, node.version)
        if node.children:
            raise NotEmptyError(f"cannot delete {path}: it has {len(node.children)} children")
        parent = self.node(parent_path)
        if not node.owner:
            self.persist([], [path])

        del parent.children[name]
        if node.owner:
            self.ephemerals.get(node.owner, set()).discard(path)
        self.notify([WatchEvent(EventType.DELETED, path), WatchEvent(EventType.CHILDREN_CHANGED, parent_path)])

    def end_session(self, owner: int) -> None:
        """Delete a session's ephemeral nodes (they never have children)."""
        for path in sorted(self.ephemerals.pop(owner, ()), reverse=True):
            try:
                self.delete(path, ANY_VERSION)
            except NoNodeError:
                pass

    def persist(self, upserts: list[Row], deletes: list[str] = ()) -> None:
        if self.disk is not None:
            self.disk.write(upserts, list(deletes))

    def notify(self, events: list[WatchEvent]) -> None:
        for event in events:
            if event.type is not EventType.CHILDREN_CHANGED:
                for handle in list(self.data_watches.get(event.path, ())):
                    handle.fire(event)
            if event.type is not EventType.CHANGED:
                # A children watch also hears of its node's creation (as a change of the
                # child set, from none to empty) and deletion, as the ZooKeeper backend does.
                seen = WatchEvent(EventType.CHILDREN_CHANGED, event.path) if event.type is EventType.CREATED else event
                for handle in list(self.child_watches.get(event.path, ())):
                    handle.fire(seen)


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
        """A session on the process-wide tree called ``name`` (created empty on first use)."""
        key = f"memory://{name}"
        tree = _trees.get(key)
        if tree is None:
            tree = _trees[key] = _Tree(key, None)
        return cls(tree, asyncio.get_running_loop())

    @classmethod
    async def open_file(cls, directory: str, *, session_timeout_s: float = 10.0) -> "EmbeddedStore":
        """A session on the tree persisted in ``directory``.

        Raises MetadataError when another process holds the directory or its database is unreadable.
        """
        if not directory:
            raise ValueError("file:// metadata store URL needs a directory, e.g. file://./data/metadata")
        path = Path(directory).expanduser().resolve()
        key = f"file://{path}"
        tree = _trees.get(key)
        if tree is None:
            disk = _SqliteLog(path)
            try:
                tree = _Tree(key, disk)
            except BaseException:
                disk.close()
                raise
            _trees[key] = tree
        return cls(tree, asyncio.get_running_loop())

    def _live_tree(self) -> _Tree:
        if self._closed:
            raise SessionExpiredError("this metadata store session is closed")
        return self._tree

    async def get(self, path: str) -> tuple[bytes, Stat]:
        node = self._live_tree().node(path)
        return node.data, node.stat()

    async def exists(self, path: str) -> Stat | None:
        node = self._live_tree().find(path)
        return None if node is None else node.stat()

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        owner = self._session_id if ephemeral else 0
        return self._live_tree().create(path, data, owner, sequential, make_parents)

    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        return self._live_tree().set(path, data, expected_version)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        self._live_tree().delete(path, expected_version)

    async def children(self, path: str) -> list[str]:
        return sorted(self._live_tree().node(path).children)

    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(self._live_tree().data_watches, path, callback)

    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        return self._watch(self._live_tree().child_watches, path, callback)

    def _watch(self, table: dict, path: str, callback: WatchCallback) -> Watch:
        handle = _WatchHandle(table, check_path(path), callback, self._loop)
        self._watches.add(handle)
        return handle

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._session_id

    def _tell(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._loop.call_soon(listener, state)

    async def expire_session(self) -> None:
        self._live_tree().end_session(self._session_id)
        self._tell(SessionState.LOST)
        self._session_id = next(_session_ids)
        self._tell(SessionState.CONNECTED)
        await asyncio.sleep(0)  # listeners were queued first, so they have run when this returns

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tree = self._tree
        for handle in list(self._watches):
            handle.cancel()
        try:
            tree.end_session(self._session_id)
        finally:
            tree.sessions.discard(self)
            if not tree.sessions and tree.disk is not None:
                # Last session on a persisted tree: release the directory, so another process
                # (or a later open in this one) loads it fresh from disk.
                tree.disk.close()
                _trees.pop(tree.key, None)
