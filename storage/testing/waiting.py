"""Waiting for a condition with a deadline: how tests and benchmarks synchronise with what cannot tell them.

    wait_until(bookie.is_healthy, 30, "the bookie to report healthy")
    ledgers = await wait_until_async(lambda: store.get_children(path), 10, "ledgers to appear")

``condition`` is called until it returns something truthy, which is returned. At the deadline
``TimeoutError`` says what was awaited: ``what``, or ``what()`` when it is callable (to describe the state
the wait ended in). The condition runs at least once, even with no time left. An
exception from the condition propagates at once (a process that exited is not worth waiting for).
The poll interval is not the synchronisation; the deadline is. A sleep that stands in for a condition
is a bug.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable

Described = str | Callable[[], str]


def _timed_out(timeout_s: float, what: Described) -> TimeoutError:
    return TimeoutError(f"timed out after {timeout_s:.1f}s waiting for {what() if callable(what) else what}")


def wait_until(condition: Callable[[], Any], timeout_s: float, what: Described, interval_s: float = 0.05) -> Any:
    """Poll ``condition()`` until truthy (returned) or ``timeout_s`` passes (TimeoutError naming ``what``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(timeout_s, what)
        time.sleep(interval_s)


async def wait_until_async(condition: Callable[[], Any | Awaitable[Any]], timeout_s: float, what: Described,
                           interval_s: float = 0.01) -> Any:
    """``wait_until`` on an event loop: ``condition`` may be plain or return an awaitable (a coroutine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise _timed_out(timeout_s, what)
        await asyncio.sleep(interval_s)
