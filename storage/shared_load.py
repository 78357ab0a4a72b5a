"""Loads shared by key: concurrent callers asking for the same thing wait on one load, never start two.

Used where opening is expensive and must happen once per name at a time: a managed ledger (opening fences
the previous owner) and a broker topic (which opens that managed ledger).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

T = TypeVar("T")


class SharedLoads(Generic[T]):
    def __init__(self) -> None:
        self._pending: dict[Hashable, asyncio.Future] = {}

    async def load(self, key: Hashable, start: Callable[[], Awaitable[T]]) -> T:
        """Run ``start()`` for ``key`` unless a load of it is under way, in which case share its outcome."""
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            value = await start()
            fut.set_result(value)
            return value
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters re-raise it themselves
            raise
        finally:
            self._pending.pop(key, None)
