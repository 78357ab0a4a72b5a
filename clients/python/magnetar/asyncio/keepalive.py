"""The keep-alive timer both ends of a Pulsar connection run (the broker's and the client's connection).

The session decides (magnetar.protocol.session.PulsarSession.keep_alive: send a
PING, do nothing, or give the peer up); this timer only asks it every
``keep_alive_s`` and carries the decision out through two callbacks.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from magnetar.protocol.session import KeepAlive, PulsarSession


class KeepAliveTimer:
    def __init__(self, session: PulsarSession, ping: Callable[[], None], dead: Callable[[], None]):
        self.session = session
        self._ping = ping
        self._dead = dead
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self.session.keep_alive_s > 0:
            self._handle = asyncio.get_running_loop().call_later(self.session.keep_alive_s, self._tick)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        action = self.session.keep_alive()
        if action is KeepAlive.DEAD:
            self._handle = None
            self._dead()
            return
        if action is KeepAlive.PING:
            self._ping()
        self.start()
