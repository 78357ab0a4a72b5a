"""The broker-wide bound on dispatch reads in flight (managedLedgerMaxReadsInFlightSizeInMB)."""

import asyncio

import pytest

from broker.subscriptions.reads_in_flight import ReadsInFlight


async def test_a_read_waits_until_others_are_handed_out():
    bound = ReadsInFlight(100)
    assert await bound.acquire(60) == 60
    second = asyncio.ensure_future(bound.acquire(60))
    await asyncio.sleep(0)
    assert not second.done() and bound.waited == 1
    bound.release(60)
    assert await asyncio.wait_for(second, 1) == 60
    assert bound.in_flight == 60


async def test_a_read_larger_than_the_bound_goes_alone():
    bound = ReadsInFlight(100)
    assert await bound.acquire(500) == 100
    small = asyncio.ensure_future(bound.acquire(1))
    await asyncio.sleep(0)
    assert not small.done()
    bound.release(100)
    assert await asyncio.wait_for(small, 1) == 1


async def test_a_cancelled_waiter_takes_nothing():
    bound = ReadsInFlight(10)
    await bound.acquire(10)
    waiting = asyncio.ensure_future(bound.acquire(5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    bound.release(10)
    assert bound.in_flight == 0


async def test_zero_is_unlimited():
    bound = ReadsInFlight(0)
    for _ in range(1000):
        assert await bound.acquire(10**9) == 0
    assert bound.in_flight == 0
