"""Broker-wide bounds on what clients may hold: connections (in all and per address) and in-flight publish bytes.

Pulsar's keys: ``brokerMaxConnections`` and ``brokerMaxConnectionsPerIp`` refuse a connection beyond them
(closed at once, before any command is read); ``maxMessagePublishBufferSizeInMB`` bounds the bytes of SENDs
the broker has read but not yet stored -- over it, reading stops on each connection that sends more, until
the stored backlog falls to half of it. That is backpressure, not an error: the clients' own queues fill and
block or fail as their settings say.
"""

from __future__ import annotations

from collections import Counter

PUBLISH_BUFFER = "publish buffer"


class ConnectionLimits:
    def __init__(self, max_connections: int = 0, max_per_ip: int = 0):
        self.max_connections = max_connections  # 0 = unlimited
        self.max_per_ip = max_per_ip
        self.total = 0
        self.by_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; the reason it is refused, or None when it may stay."""
        if self.max_connections and self.total >= self.max_connections:
            return f"the broker has its maximum of {self.max_connections} connections (brokerMaxConnections)"
        if self.max_per_ip and self.by_ip[ip] >= self.max_per_ip:
            return f"{ip} has its maximum of {self.max_per_ip} connections (brokerMaxConnectionsPerIp)"
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


class PublishBuffer:
    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes  # 0 = unlimited
        self.in_flight = 0
        self._paused: dict[int, object] = {}  # id(connection) -> the connection whose reading it paused

    def add(self, conn, nbytes: int) -> None:
        self.in_flight += nbytes
        if self.limit_bytes and self.in_flight > self.limit_bytes and id(conn) not in self._paused:
            self._paused[id(conn)] = conn
            conn.tasks.pause_reading(PUBLISH_BUFFER)

    def release(self, nbytes: int) -> None:
        self.in_flight -= nbytes
        if self._paused and self.in_flight <= self.limit_bytes // 2:
            paused, self._paused = self._paused, {}
            for conn in paused.values():
                conn.tasks.resume_reading(PUBLISH_BUFFER)

    def forget(self, conn) -> None:
        self._paused.pop(id(conn), None)
