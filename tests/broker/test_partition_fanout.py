"""A partitioned topic's admin request acts on its partitions a bounded number at a time, answers in order."""

from __future__ import annotations

import asyncio

from broker.http.partitions import PARTS_IN_FLIGHT, each_at_once


async def test_parts_run_a_bounded_number_at_a_time_and_answer_in_order():
    running, most = 0, 0
    release = asyncio.Event()

    async def part(i):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()  # every part started so far is held: the gate alone decides how many run
        running -= 1
        return 200, i

    answers = asyncio.ensure_future(each_at_once(part(i) for i in range(3 * PARTS_IN_FLIGHT)))
    for _ in range(10):
        await asyncio.sleep(0)  # let every part that may start, start
    assert (running, most) == (PARTS_IN_FLIGHT, PARTS_IN_FLIGHT)
    release.set()
    assert await answers == [(200, i) for i in range(3 * PARTS_IN_FLIGHT)]
    assert most == PARTS_IN_FLIGHT
