"""A ledger handle's adds in flight are bounded (max_pending_adds_per_ledger / ..._bytes_per_ledger): over the
bound add_entry_async fails at once and add_entry waits its turn, up to wait_timeout_on_backpressure_s; both
with TooManyPendingAddsError. Adds are held in flight by a scripted hold on the first add's request."""

from __future__ import annotations

import asyncio

import pytest

from storage.client import ClientConfig, FaultPlan
from storage.errors import TooManyPendingAddsError


async def _held_writer(cluster, **config):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    client = await cluster.client(ClientConfig(add_entry_timeout_s=30, **config), faults=plan)
    writer = await client.create_ledger(3, 3, 3)
    hold = plan.hold_next(None, ops={"add"}, entry_id=0)  # entry 0 cannot complete, so nothing after it can
    return writer, hold


async def test_over_the_count_add_entry_async_fails_at_once_and_add_entry_waits(cluster):
    writer, hold = await _held_writer(cluster, max_pending_adds_per_ledger=3)
    first = [writer.add_entry_async(b"x") for _ in range(3)]
    await hold.reached
    refused = writer.add_entry_async(b"x")
    assert refused.done() and isinstance(refused.exception(), TooManyPendingAddsError)
    assert "3 adds" in str(refused.exception())
    waiting = asyncio.ensure_future(writer.add_entry(b"waits"))
    await asyncio.sleep(0)
    assert not waiting.done() and writer.pending_adds == 3  # it is not sent: it waits for room
    hold.release()
    assert await asyncio.gather(*first) == [0, 1, 2]
    assert await waiting == 3  # the refused add took no entry id
    assert [e.payload for e in await writer.read_entries(3, 3)] == [b"waits"]


async def test_over_the_bytes_the_same(cluster):
    writer, hold = await _held_writer(cluster, max_pending_add_bytes_per_ledger=1000)
    first = writer.add_entry_async(b"a" * 600)
    await hold.reached
    refused = writer.add_entry_async(b"b" * 600)
    assert isinstance(refused.exception(), TooManyPendingAddsError)
    small = writer.add_entry_async(b"c" * 300)  # what fits still goes
    hold.release()
    assert (await first, await small) == (0, 1)


async def test_add_entry_gives_up_after_the_backpressure_timeout(cluster):
    writer, hold = await _held_writer(cluster, max_pending_adds_per_ledger=1, wait_timeout_on_backpressure_s=0.2)
    first = writer.add_entry_async(b"x")
    await hold.reached
    with pytest.raises(TooManyPendingAddsError):
        await writer.add_entry(b"y")
    hold.release()
    assert await first == 0
    assert await writer.add_entry(b"z") == 1  # room again once the first is answered
