"""The managed ledger bounds the adds it has taken and not answered (max_pending_add_entries / _bytes): over the
bound an add waits its turn -- backpressure, never an error -- and the log keeps the order the adds were made in.
Real in-process bookies; the first add is held in flight by a scripted hold."""

from __future__ import annotations

import asyncio

from storage.client import ClientConfig, FaultPlan
from storage.errors import ManagedLedgerFencedError
from storage.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from storage.testing.waiting import wait_until_async


async def test_adds_over_the_bound_wait_in_order_and_none_fails(cluster):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    client = await cluster.client(ClientConfig(add_entry_timeout_s=30), faults=plan)
    factory = ManagedLedgerFactory(cluster.store, client)
    ml = await factory.open("t/ns/persistent/bounded-adds", ManagedLedgerConfig(max_pending_add_entries=2))
    hold = plan.hold_next(None, ops={"add"}, entry_id=0)
    adds = [asyncio.ensure_future(ml.add_entry(f"m{i}".encode())) for i in range(5)]
    await hold.reached
    await wait_until_async(lambda: ml.adds_waiting == 3, 5, "three adds waiting for room")
    assert not any(add.done() for add in adds)
    hold.release()
    positions = await asyncio.gather(*adds)
    assert [p.entry_id for p in positions] == [0, 1, 2, 3, 4]
    assert len({p.ledger_id for p in positions}) == 1 and ml.adds_waiting == 0
    reader = ml.new_non_durable_cursor()
    assert [e.data for e in await reader.read_entries(10)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    await reader.close()
    await factory.close()


async def test_a_fenced_managed_ledger_fails_the_adds_that_wait(cluster):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    client = await cluster.client(ClientConfig(add_entry_timeout_s=30), faults=plan)
    factory = ManagedLedgerFactory(cluster.store, client)
    ml = await factory.open("t/ns/persistent/bounded-fenced", ManagedLedgerConfig(max_pending_add_entries=1))
    hold = plan.hold_next(None, ops={"add"}, entry_id=0)
    adds = [asyncio.ensure_future(ml.add_entry(b"x")) for _ in range(3)]
    await hold.reached
    await wait_until_async(lambda: ml.adds_waiting == 2, 5, "two adds waiting for room")
    ml.fence(RuntimeError("scripted: another owner took the topic"))
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert all(isinstance(r, ManagedLedgerFencedError) for r in results), results
    assert ml.adds_waiting == 0
    hold.release()
    await factory.close()
