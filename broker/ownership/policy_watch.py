"""Namespace policies reach the topics loaded on this broker while they stay loaded, whichever broker changed them.

How it works: while a namespace has topics loaded here, one persistent
metadata watch is kept on its policies node (``/admin/policies/<t>/<ns>``).
A notification re-reads the policies and hands them to every loaded topic of
the namespace (``PersistentTopic.apply_policies``: rates at once, the limits
read from the policies from then on). Reads for one namespace run one at a
time; a change during a read causes one more read, so the last one applied is
never older than the last change. A topic also gets one read of its own
right after it is attached, since the policies it loaded with were read
before the watch covered it.
"""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError, metadata_errors
from broker.ownership.resources import POLICIES_ROOT
from magnetar.topic_name import NamespaceName
from storage.errors import StorageError

log = logging.getLogger(__name__)


class _Namespace:
    __slots__ = ("topics", "watch", "task", "dirty")

    def __init__(self):
        self.topics: dict[int, object] = {}  # id(topic) -> topic
        self.watch = None
        self.task: asyncio.Task | None = None
        self.dirty = False


class PolicyWatch:
    def __init__(self, store, resources):
        self.store = store
        self.resources = resources
        self._namespaces: dict[NamespaceName, _Namespace] = {}
        self.refreshes = 0  # policy reads applied (stats, tests)

    def attach(self, topic) -> None:
        """Keep ``topic`` in step with its namespace's policies until it closes."""
        ns = topic.name.namespace_name
        entry = self._namespaces.get(ns)
        if entry is None:
            entry = self._namespaces[ns] = _Namespace()
            with metadata_errors(f"watching the policies of {ns}"):
                entry.watch = self.store.watch_data(f"{POLICIES_ROOT}/{ns.tenant}/{ns.namespace}",
                                                    lambda _event, ns=ns: self._changed(ns))
        entry.topics[id(topic)] = topic
        topic.closing_hooks.append(lambda: self.detach(topic))
        self._changed(ns)

    def detach(self, topic) -> None:
        ns = topic.name.namespace_name
        entry = self._namespaces.get(ns)
        if entry is None or entry.topics.pop(id(topic), None) is None or entry.topics:
            return
        del self._namespaces[ns]
        entry.watch.cancel()
        if entry.task is not None:
            entry.task.cancel()

    def close(self) -> None:
        for entry in self._namespaces.values():
            entry.watch.cancel()
            if entry.task is not None:
                entry.task.cancel()
        self._namespaces.clear()

    def _changed(self, ns: NamespaceName) -> None:
        entry = self._namespaces.get(ns)
        if entry is None:
            return
        entry.dirty = True
        if entry.task is None:
            entry.task = asyncio.get_running_loop().create_task(self._refresh(ns, entry))

    async def _refresh(self, ns: NamespaceName, entry: _Namespace) -> None:
        try:
            while entry.dirty:
                entry.dirty = False
                try:
                    policies = await self.resources.get_policies(ns)
                except (BrokerError, StorageError) as exc:  # deleted, or the store is unreachable: keep what we have
                    log.info("policies of %s not re-read: %s", ns, exc)
                    continue
                for topic in list(entry.topics.values()):
                    if not topic.closed:
                        topic.apply_policies(policies)
                self.refreshes += 1
        finally:
            entry.task = None
