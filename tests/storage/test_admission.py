"""AddAdmission: the bound on adds in flight, first come first served (storage/admission.py). No I/O."""

from __future__ import annotations

import asyncio

import pytest

from storage.admission import AddAdmission


@pytest.mark.parametrize("max_entries, max_bytes, held, size, admitted", [
    (3, 100, [], 10, True),
    (3, 100, [10, 10], 10, True),
    (3, 100, [10, 10, 10], 10, False),   # the count is full
    (3, 100, [50], 50, True),
    (3, 100, [50], 51, False),           # the bytes would be over
    (3, 100, [], 500, True),             # alone, an add larger than the byte bound still goes
    (3, 100, [1], 500, False),           # ... but not beside another
])
def test_try_admit_from_a_table(max_entries, max_bytes, held, size, admitted):
    gate = AddAdmission(max_entries, max_bytes)
    for n in held:
        assert gate.try_admit(n)
    assert gate.try_admit(size) is admitted
    assert gate.entries == len(held) + admitted


async def test_waiters_are_admitted_in_arrival_order_and_nobody_overtakes():
    gate = AddAdmission(max_entries=1, max_bytes=100)
    assert gate.try_admit(10)
    order: list[str] = []

    async def add(name: str) -> None:
        await gate.admit(10)
        order.append(name)

    first = asyncio.ensure_future(add("first"))
    second = asyncio.ensure_future(add("second"))
    await asyncio.sleep(0)  # let both queue
    assert gate.waiting == 2 and not first.done()
    gate.release(10)  # room for one: "first" is admitted ...
    assert not gate.try_admit(10)  # ... and a newcomer may not slip in before it has run
    await first
    assert order == ["first"] and gate.waiting == 1
    gate.release(10)
    await second
    assert order == ["first", "second"]
    assert (gate.entries, gate.bytes) == (1, 10)


async def test_a_cancelled_waiter_takes_no_room_and_lets_the_next_in():
    gate = AddAdmission(max_entries=1, max_bytes=100)
    assert gate.try_admit(10)
    doomed = asyncio.ensure_future(gate.admit(10))
    behind = asyncio.ensure_future(gate.admit(20))
    await asyncio.sleep(0)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    gate.release(10)
    await behind
    assert (gate.entries, gate.bytes, gate.waiting) == (1, 20, 0)


async def test_a_waiter_admitted_then_cancelled_gives_its_room_back():
    gate = AddAdmission(max_entries=1, max_bytes=100)
    assert gate.try_admit(10)
    waiter = asyncio.ensure_future(gate.admit(10))
    await asyncio.sleep(0)
    gate.release(10)  # admits the waiter (room reserved for it) ...
    waiter.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (gate.entries, gate.bytes) == (0, 0)
    assert gate.try_admit(10)
