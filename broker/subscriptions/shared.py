"""Round-robin choice of the next Shared consumer that can take a message.

A consumer can take messages when it has flow permits and is not blocked by
its unacked-message limit; the caller passes that test as ``can_take``. The
selector remembers whom it served last, so consumers take turns.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

C = TypeVar("C")


class RoundRobinSelector:
    def __init__(self) -> None:
        self._last = -1

    def next(self, consumers: Sequence[C], can_take: Callable[[C], bool]) -> C | None:
        """The first consumer after the one served last that ``can_take``; None when none can."""
        n = len(consumers)
        for step in range(1, n + 1):
            i = (self._last + step) % n
            if can_take(consumers[i]):
                self._last = i
                return consumers[i]
        return None
