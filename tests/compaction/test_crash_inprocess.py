"""A crashed run leaks nothing: the ledger it created is deleted when the topic is loaded again.

In-process (tier 2), on the managed-ledger tests' backends (real bookies and in-memory ledgers): a run is held
at the start of phase two by a scripted hook and never resumed -- as if its broker had died -- while a second
"broker" opens the same managed ledger (fencing the first) and loads the compaction state.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.compaction import model
from broker.compaction.compactor import CompactionStatus, TopicCompaction
from storage.errors import NoSuchLedgerError
from storage.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from tests.compaction.test_model import single
from tests.managed_ledger.conftest import Cluster, MemoryLedgers, cluster, ledgers  # noqa: F401 (fixtures re-used)

CONFIG = ManagedLedgerConfig(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)


class HeldInPhaseTwo(TopicCompaction):
    """Stops a run where phase two begins (the new ledger exists and is recorded as pending)."""

    def __init__(self, topic):
        super().__init__(topic)
        self.reached = asyncio.get_running_loop().create_future()
        self.never = asyncio.get_running_loop().create_future()

    async def _write(self, handle, *args):
        self.reached.set_result(handle.ledger_id)
        await self.never
        return await super()._write(handle, *args)


def _topic(ml, tasks):
    def spawn(coro):
        task = asyncio.get_running_loop().create_task(coro)
        tasks.append(task)
        return task

    return SimpleNamespace(ml=ml, name=ml.name, config=SimpleNamespace(), policies=None, spawn=spawn)


async def _open(ledgers, name):
    factory = ManagedLedgerFactory(ledgers.store, await ledgers.client())
    return await factory.open(name, CONFIG)


async def _fill(ml, items):
    for key, value in items:
        await ml.add_entry(single(key, value))


@pytest.mark.parametrize("earlier_run", [False, True], ids=["first-run", "later-run"])
async def test_a_run_that_died_in_phase_two_leaves_the_published_view_and_no_ledger(ledgers, earlier_run):
    await ledgers.start_bookies(1)
    tasks: list[asyncio.Task] = []
    name = f"public/default/persistent/crash-{earlier_run}"
    ml = await _open(ledgers, name)
    await _fill(ml, [(f"k{i % 3}", f"v{i}".encode()) for i in range(9)])
    published = None
    if earlier_run:
        first = TopicCompaction(_topic(ml, tasks))
        await first.trigger()
        assert first.status is CompactionStatus.SUCCESS
        published, horizon = first.ledger_id, first.horizon
        await _fill(ml, [("k0", b"later")])

    held = HeldInPhaseTwo(_topic(ml, tasks))
    if earlier_run:
        await held.restore()
    held.trigger()
    pending = await asyncio.wait_for(held.reached, 30)
    assert ml.cursors[model.CURSOR_NAME].properties.get(model.PENDING_LEDGER) == pending

    # A second broker takes the topic over; the first never runs again.
    ml2 = await _open(ledgers, name)
    restored = TopicCompaction(_topic(ml2, tasks))
    await restored.restore()
    cursor = ml2.cursors[model.CURSOR_NAME]
    assert model.PENDING_LEDGER not in cursor.properties
    client = await ledgers.client()
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(pending, recovery=False, password=ml2.password)
    if earlier_run:
        assert restored.ledger_id == published and restored.horizon == horizon
        assert cursor.properties == {model.COMPACTED_LEDGER: published}
        assert sorted(k for k, _ in [(m.key, None) async for m in _keys(restored)]) == ["k0", "k1", "k2"]
    else:
        assert restored.reader is None and restored.horizon is None

    # And the next run completes on the new owner.
    await restored.trigger()
    assert restored.status is CompactionStatus.SUCCESS, restored.last_error
    assert restored.last_run["keys"] == 3
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _keys(compaction):
    async for _, data in compaction.reader.scan():
        for m in model.keyed_messages(data):
            yield m


async def test_deleting_the_topic_deletes_its_compacted_ledger(ledgers):
    await ledgers.start_bookies(1)
    tasks: list[asyncio.Task] = []
    ml = await _open(ledgers, "public/default/persistent/deleted")
    await _fill(ml, [("a", b"1"), ("a", b"2")])
    compaction = TopicCompaction(_topic(ml, tasks))
    await compaction.trigger()
    ledger_id = compaction.ledger_id
    await compaction.close()
    await compaction.delete_ledgers()
    await ml.delete()
    client = await ledgers.client()
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(ledger_id, recovery=False, password=ml.password)
