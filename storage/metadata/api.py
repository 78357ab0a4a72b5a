"""The async metadata-store interface every backend implements.

Semantics follow ZooKeeper, because the production backend is ZooKeeper and
the embedded backend must be indistinguishable to its users:

* Nodes form a tree of absolute paths (``/ledgers/available/b1``); a node has
  data (bytes) and a ``version`` that starts at 0 on create and grows by one
  on every ``set``.
* ``set`` and ``delete`` take an ``expected_version``; ``-1`` means "any".
  A mismatch raises ``BadVersionError`` and changes nothing. This conditional
  write is the only way shared metadata is read-modified-written.
* One store instance is one *session*. Ephemeral nodes belong to the session
  that created them and vanish when it expires or closes. When a session
  expires, listeners receive ``SessionState.LOST``; the store then opens a
  fresh session (``CONNECTED`` follows) and the owner must re-create its
  ephemeral nodes.
* Watches are persistent until cancelled. A data watch fires on create,
  change and delete of its node; a children watch fires when the set of
  children changes, when the node is created (``CHILDREN_CHANGED``) and
  when it is deleted (``DELETED``). Rapid changes may be coalesced
  into one notification, so a callback re-reads the state it cares about.
  Callbacks run on the event loop that opened the store, never on a foreign
  thread, and must not block. A watch is in force once any later operation
  of the same store has completed, so the pattern is: register the watch,
  then read the state it guards through the same store; every change after
  that read is notified.

Errors raised: ``NoNodeError``, ``NodeExistsError``, ``BadVersionError``,
``NotEmptyError``, ``NoChildrenForEphemeralsError``, ``SessionExpiredError``,
``MetadataConnectionError`` (retriable), ``BadArgumentsError`` (invalid
path), all from ``storage.errors``.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import Callable

ANY_VERSION = -1


@dataclass(frozen=True)
class Stat:
    version: int
    created_ms: int
    modified_ms: int
    ephemeral_owner: int  # session id of the owner, 0 for persistent nodes
    num_children: int


class EventType(enum.Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    path: str


class SessionState(enum.Enum):
    CONNECTED = "connected"      # a (new or resumed) session is usable
    SUSPENDED = "suspended"      # connection lost; the session may still be alive
    LOST = "lost"                # session expired: its ephemeral nodes are gone


WatchCallback = Callable[[WatchEvent], None]
SessionListener = Callable[[SessionState], None]


class Watch(abc.ABC):
    """Handle to a registered watch."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop delivering events. Idempotent."""


class MetadataStore(abc.ABC):
    """One session on a metadata store. See the module docstring for semantics."""

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat]:
        """Data and stat of a node. Raises NoNodeError."""

    @abc.abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """Stat of a node, or None when it does not exist."""

    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its path (with the sequence suffix if sequential).

        Sequential nodes get a 10-digit zero-padded counter appended, unique
        per parent. ``make_parents`` creates missing ancestors as persistent
        empty nodes. Raises NodeExistsError, NoNodeError (missing parent
        without make_parents), NoChildrenForEphemeralsError.
        """

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        """Replace a node's data if its version matches. Raises NoNodeError, BadVersionError."""

    @abc.abstractmethod
    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Delete a node if its version matches. Raises NoNodeError, BadVersionError, NotEmptyError."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of a node's children, sorted. Raises NoNodeError."""

    @abc.abstractmethod
    def watch_data(self, path: str, callback: WatchCallback) -> Watch:
        """Persistent watch on one node's creation, data changes and deletion."""

    @abc.abstractmethod
    def watch_children(self, path: str, callback: WatchCallback) -> Watch:
        """Persistent watch on the set of a node's children."""

    @abc.abstractmethod
    def add_session_listener(self, listener: SessionListener) -> None:
        """Be told of session state changes (LOST means ephemerals are gone)."""

    @property
    @abc.abstractmethod
    def session_id(self) -> int:
        """Id of the current session (changes after LOST)."""

    @abc.abstractmethod
    async def expire_session(self) -> None:
        """Test seam: expire this store's session as the server would.

        Ephemeral nodes of the session are deleted, listeners get LOST and
        then CONNECTED on a fresh session. Returns once the new session is usable.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session (its ephemeral nodes vanish) and release resources."""

    # ---- conveniences built on the primitives (shared by every backend) ----

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its ancestors as persistent nodes when missing."""
        from storage.errors import NodeExistsError

        if await self.exists(path) is not None:
            return
        try:
            await self.create(path, b"", make_parents=True)
        except NodeExistsError:
            pass

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything under it; missing nodes are ignored."""
        from storage.errors import NoNodeError

        try:
            kids = await self.children(path)
        except NoNodeError:
            return
        for kid in kids:
            await self.delete_recursive(join(path, kid))
        try:
            await self.delete(path)
        except NoNodeError:
            pass

    async def __aenter__(self) -> "MetadataStore":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def join(parent: str, child: str) -> str:
    return ("" if parent == "/" else parent) + "/" + child


def check_path(path: str) -> str:
    """``path`` itself if it names a node; BadArgumentsError otherwise.

    Every backend checks paths with this one function: kazoo would silently
    turn ``a/b`` or ``/a//b`` into some other node.
    """
    from storage.errors import BadArgumentsError

    if not isinstance(path, str) or not path.startswith("/"):
        raise BadArgumentsError(f"invalid metadata path {path!r}: must be an absolute path")
    if path != "/" and any(part in ("", ".", "..") for part in path[1:].split("/")):
        raise BadArgumentsError(f"invalid metadata path {path!r}: empty, '.' or '..' component")
    if "\0" in path:
        raise BadArgumentsError(f"invalid metadata path {path!r}: NUL character")
    return path
