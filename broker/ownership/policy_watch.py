"""Namespace and topic policies reach the topics loaded on this broker while they stay loaded, whichever broker
changed them.

How it works: while a namespace has topics loaded here, one persistent
metadata watch is kept on its policies node (``/admin/policies/<t>/<ns>``),
and one on each loaded topic's own policies node
(``/admin/topic-policies/<t>/<ns>/persistent/<topic>``, shared by the
partitions of a partitioned topic; it may not exist yet: the watch sees it
created). A notification re-reads the node and hands the policies to every
topic following it (``PersistentTopic.apply_policies`` /
``apply_topic_policies``: rates at once, dedup, retention, persistence,
unacked limits, TTL and backlog quota in a task of the topic's). Reads of one
node run one at a time; a change during a read causes one more read, so the
last one applied is never older than the last change. A topic also gets one
read of each right after it is attached, since the policies it loaded with
were read before the watch covered it; that read is applied to the topics
attached since the last read only, so loading n topics of a namespace costs
n applications, not one per topic already loaded for each (n^2 / 2).
"""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError, metadata_errors
from broker.ownership.resources import POLICIES_ROOT
from storage.errors import StorageError

log = logging.getLogger(__name__)


class _Watched:
    """One policies node and the loaded topics that follow it."""

    __slots__ = ("topics", "watch", "task", "dirty", "fresh", "read", "apply")

    def __init__(self, read, apply):
        self.topics: dict[int, object] = {}  # id(topic) -> topic
        self.watch = None
        self.task: asyncio.Task | None = None
        self.dirty = False  # the node changed: every topic needs the next read
        self.fresh: dict[int, object] = {}  # attached since the last read began: only they need the next read
        self.read = read  # async () -> policies
        self.apply = apply  # (topic, policies) -> None


class PolicyWatch:
    def __init__(self, store, resources):
        self.store = store
        self.resources = resources
        self._nodes: dict[str, _Watched] = {}  # by node path
        self.refreshes = 0  # policy reads applied (stats, tests)

    def attach(self, topic) -> None:
        """Keep ``topic`` in step with its namespace's policies and its own until it closes."""
        ns = topic.name.namespace_name
        self._follow(topic, f"{POLICIES_ROOT}/{ns.tenant}/{ns.namespace}",
                     lambda: self.resources.get_policies(ns), lambda t, p: t.apply_policies(p))
        self._follow(topic, self.resources.topic_policies_path(topic.name),
                     lambda: self.resources.get_topic_policies(topic.name), lambda t, p: t.apply_topic_policies(p))
        topic.closing_hooks.append(lambda: self.detach(topic))

    def _follow(self, topic, path: str, read, apply) -> None:
        entry = self._nodes.get(path)
        if entry is None:
            entry = self._nodes[path] = _Watched(read, apply)
            with metadata_errors(f"watching the policies at {path}"):
                entry.watch = self.store.watch_data(path, lambda _event, path=path: self._changed(path))
        entry.topics[id(topic)] = topic
        entry.fresh[id(topic)] = topic
        self._schedule(entry, path)

    def detach(self, topic) -> None:
        for path, entry in list(self._nodes.items()):
            if entry.topics.pop(id(topic), None) is None or entry.topics:
                continue
            del self._nodes[path]
            entry.watch.cancel()
            if entry.task is not None:
                entry.task.cancel()
        for entry in self._nodes.values():
            entry.fresh.pop(id(topic), None)

    def close(self) -> None:
        for entry in self._nodes.values():
            entry.watch.cancel()
            if entry.task is not None:
                entry.task.cancel()
        self._nodes.clear()

    def _changed(self, path: str) -> None:
        entry = self._nodes.get(path)
        if entry is None:
            return
        entry.dirty = True
        self._schedule(entry, path)

    def _schedule(self, entry: _Watched, path: str) -> None:
        if entry.task is None:
            entry.task = asyncio.get_running_loop().create_task(self._refresh(path, entry))

    async def _refresh(self, path: str, entry: _Watched) -> None:
        try:
            while entry.dirty or entry.fresh:
                targets = entry.topics if entry.dirty else entry.fresh
                entry.dirty, entry.fresh = False, {}
                targets = list(targets.values())
                try:
                    policies = await entry.read()
                except (BrokerError, StorageError) as exc:  # deleted, or the store is unreachable: keep what we have
                    log.info("policies at %s not re-read: %s", path, exc)
                    continue
                for topic in targets:
                    if not topic.closed:
                        entry.apply(topic, policies)
                self.refreshes += 1
        finally:
            entry.task = None
