"""Which host of the service URL to dial (``pulsar://h1:p1,h2:p2``): the hosts in turn, round-robin on reconnect.

The service URL is only the way in: lookups, partition counts and topic lists go to it, and a lookup's answer
names the broker that serves the topic. With several hosts the client dials them in the URL's order at first and
keeps using the one that answered. When a new connection to the service URL is needed (the one it used was lost),
it starts at the host after the one it used last, so the hosts share the reconnects; a host that cannot be
reached is skipped for the next one, and only when none answers does the attempt fail. A whole attempt that fails
moves the starting host on by one as well, so a retry does not always begin at the same dead host.
"""

from __future__ import annotations


class ServiceHosts:
    """The rotation; pure (no I/O), driven by ``to_try`` / ``answered`` / ``none_answered``."""

    def __init__(self, addresses: tuple[str, ...]):
        if not addresses:
            raise ValueError("a service URL needs at least one host")
        self.addresses = tuple(addresses)
        self._next = 0  # where the next attempt starts
        self.current: str | None = None  # the host that answered last (its connection may since have been lost)

    def to_try(self) -> list[str]:
        """The hosts for one attempt, in order: every host once, starting at the next one in turn."""
        n = len(self.addresses)
        return [self.addresses[(self._next + i) % n] for i in range(n)]

    def answered(self, address: str) -> None:
        """``address`` was connected: it serves until its connection is lost; the next attempt starts after it."""
        self.current = address
        self._next = (self.addresses.index(address) + 1) % len(self.addresses)

    def none_answered(self) -> None:
        self._next = (self._next + 1) % len(self.addresses)
