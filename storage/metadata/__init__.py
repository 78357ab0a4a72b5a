"""Async metadata store: one interface, ZooKeeper (zk://) and embedded (memory://, file://) backends.

``open_store(url)`` is the single place a backend is chosen:

* ``zk://host:port[,host:port][/chroot]`` -- ZooKeeper through kazoo.
* ``memory://name`` -- in-process tree shared by every store opened with the
  same name (standalone mode, tests); gone when the process exits.
* ``file:///abs/dir`` or ``file://rel/dir`` -- the embedded tree persisted in
  ``dir`` (persistent nodes survive restarts; one process at a time).
* ``unix:///abs/socket`` -- a session on an embedded tree another process
  serves on a Unix socket (storage/metadata/served.py): how the processes of
  the multi-process standalone share one store.
"""

from storage.metadata.api import (
    ANY_VERSION,
    EventType,
    MetadataStore,
    SessionState,
    Stat,
    Watch,
    WatchEvent,
    join,
)


async def open_store(url: str, *, session_timeout_s: float = 10.0) -> MetadataStore:
    """Open a session on the metadata store named by ``url``.

    Raises ValueError for an unknown scheme, MetadataConnectionError when the
    store cannot be reached.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"metadata store URL {url!r} has no scheme (want zk://, memory://, file:// or unix://)")
    if scheme == "zk":
        from storage.metadata.zookeeper import ZooKeeperStore

        return await ZooKeeperStore.open(rest, session_timeout_s=session_timeout_s)
    if scheme == "memory":
        from storage.metadata.embedded import EmbeddedStore

        return await EmbeddedStore.open_memory(rest or "default", session_timeout_s=session_timeout_s)
    if scheme == "file":
        from storage.metadata.embedded import EmbeddedStore

        return await EmbeddedStore.open_file(rest, session_timeout_s=session_timeout_s)
    if scheme == "unix":
        from storage.metadata.remote import RemoteStore

        return await RemoteStore.open(rest, session_timeout_s=session_timeout_s)
    raise ValueError(f"unknown metadata store scheme {scheme!r} in {url!r} (want zk://, memory://, file:// or unix://)")


__all__ = [
    "ANY_VERSION",
    "EventType",
    "MetadataStore",
    "SessionState",
    "Stat",
    "Watch",
    "WatchEvent",
    "join",
    "open_store",
]
