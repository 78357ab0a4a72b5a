"""Attaching a topic to the policy watch reads the policies for that topic alone, not for every topic of its
namespace: loading n topics costs n reads and applications, not n^2 / 2 (10,000 idle topics took minutes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.ownership.policy_watch import PolicyWatch


class _Watch:
    def __init__(self, callback):
        self.callback = callback

    def cancel(self) -> None:
        self.callback = None


class _Store:
    def __init__(self):
        self.watches: dict[str, _Watch] = {}

    def watch_data(self, path, callback):
        self.watches[path] = _Watch(callback)
        return self.watches[path]


class _Resources:
    def __init__(self):
        self.namespace_policies = {"rate": 1}
        self.reads = 0

    async def get_policies(self, ns):
        self.reads += 1
        await asyncio.sleep(0)  # a real read awaits the store: topics attached meanwhile must still get theirs
        return dict(self.namespace_policies)

    def topic_policies_path(self, name):
        return f"/admin/topic-policies/{name.namespace_name.tenant}/{name.namespace_name.namespace}/persistent/{name.local}"

    async def get_topic_policies(self, name):
        return {}


@dataclass(frozen=True)
class _Namespace:
    tenant: str = "public"
    namespace: str = "default"


@dataclass(frozen=True)
class _Name:
    local: str
    namespace_name: _Namespace = _Namespace()


@dataclass(eq=False)
class _Topic:
    name: _Name
    closed: bool = False
    applied: list = field(default_factory=list)
    closing_hooks: list = field(default_factory=list)

    def apply_policies(self, policies):
        self.applied.append(policies)

    def apply_topic_policies(self, policies):
        pass


async def _settle(watch: PolicyWatch) -> None:
    while any(entry.task is not None for entry in watch._nodes.values()):
        await asyncio.sleep(0)


async def test_attaching_n_topics_applies_the_namespace_policies_n_times_not_n_squared():
    store, resources = _Store(), _Resources()
    watch = PolicyWatch(store, resources)
    topics = [_Topic(_Name(f"t{i}")) for i in range(200)]
    for i, topic in enumerate(topics):
        watch.attach(topic)
        if i % 7 == 0:  # some attach while a read is under way, some after it finished
            await _settle(watch)
    await _settle(watch)
    assert [len(t.applied) for t in topics] == [1] * len(topics)  # each got one read after it was attached
    assert resources.reads <= len(topics)


async def test_a_namespace_change_still_reaches_every_attached_topic_once_and_the_newest_value_wins():
    store, resources = _Store(), _Resources()
    watch = PolicyWatch(store, resources)
    topics = [_Topic(_Name(f"t{i}")) for i in range(20)]
    for topic in topics:
        watch.attach(topic)
    await _settle(watch)
    resources.namespace_policies = {"rate": 2}
    store.watches["/admin/policies/public/default"].callback(None)
    late = _Topic(_Name("late"))
    watch.attach(late)  # attached while the change is being read
    await _settle(watch)
    assert all(t.applied[-1] == {"rate": 2} for t in [*topics, late])
    assert [len(t.applied) for t in topics] == [2] * len(topics)
