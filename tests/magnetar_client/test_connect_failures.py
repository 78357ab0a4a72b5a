"""A connection that fails while it opens leaves no failed future behind for the loop to complain about.

During broker faults the nemesis's log had bursts of "Future exception was never retrieved" (ConnectError
"connection to ... lost"): a broker, or the proxy in front of a killed one, accepts the connection and closes it at
once. The close is seen only after create_connection returned, so connection_lost failed the handshake's future,
then writing CONNECT raised, and nobody ever awaited that future. The tests hold the client's loop to that order
with a real socket the server resets, and watch the loop's exception handler.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import threading

import pytest

from magnetar.asyncio.client import AsyncClient
from magnetar.asyncio.connection import Connection
from magnetar.errors import ConnectError
from storage.testing.waiting import wait_until_async


class ResettingServer:
    """A loopback server that resets every connection it accepts (SO_LINGER 0): at once, or, when ``held``, only
    when ``reset_accepted()`` is called."""

    def __init__(self, held: bool):
        self.held = held
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._accepted: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # the listener closed: the test is over
                return
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if self.held:
                with self._lock:
                    self._accepted.append(sock)
            else:
                sock.close()

    def reset_accepted(self) -> bool:
        """Reset the connections accepted so far; False while there is none yet."""
        with self._lock:
            accepted, self._accepted = self._accepted, []
        for sock in accepted:
            sock.close()
        return bool(accepted)

    def close(self) -> None:
        # close() alone does not wake an accept() blocked in another thread (the join then waited out its 5 s);
        # shutdown() does, on Linux.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(5)
        assert not self._thread.is_alive(), "the accept thread did not end"
        self.reset_accepted()


@pytest.fixture
def resetting_server():
    servers: list[ResettingServer] = []

    def start(held: bool) -> ResettingServer:
        servers.append(ResettingServer(held))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def loop_complaints() -> list[dict]:
    """From now on, what reaches the running loop's exception handler (the default handler would log it)."""
    seen: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: seen.append(context))
    return seen


def reset_before_returning(loop, monkeypatch, server: ResettingServer) -> None:
    """create_connection returns only once the server has reset the new connection and connection_lost ran:
    the order a loaded machine produces now and then, here every time."""
    real = loop.create_connection

    async def ordered(factory, *args, **kwargs):
        transport, protocol = await real(factory, *args, **kwargs)
        await wait_until_async(server.reset_accepted, 5, "the server to accept the connection and reset it")
        await wait_until_async(lambda: protocol.closed, 5, "the server's reset to reach the client")
        return transport, protocol

    monkeypatch.setattr(loop, "create_connection", ordered)


def messages(seen: list[dict]) -> list[str]:
    gc.collect()  # an unretrieved future complains when it is collected
    return [f"{c.get('message')}: {c.get('exception')!r}" for c in seen]


async def test_a_connection_reset_before_connect_is_written_leaves_no_unretrieved_future(
        resetting_server, monkeypatch):
    server = resetting_server(held=True)
    seen = loop_complaints()
    reset_before_returning(asyncio.get_running_loop(), monkeypatch, server)
    errors = []
    for _ in range(3):
        with pytest.raises(ConnectError) as failed:
            await Connection.open(f"127.0.0.1:{server.port}", operation_timeout_s=5)
        errors.append(str(failed.value))
    assert messages(seen) == []
    assert all("closed before the handshake" in e for e in errors), errors  # says what happened, and where


async def test_lookups_sharing_a_connection_that_resets_log_no_future_exception(resetting_server, monkeypatch):
    """The client's path: concurrent lookups wait on one connection attempt, which fails the same way."""
    server = resetting_server(held=True)
    seen = loop_complaints()
    reset_before_returning(asyncio.get_running_loop(), monkeypatch, server)
    client = AsyncClient(f"pulsar://127.0.0.1:{server.port}", operation_timeout_seconds=5)
    for _ in range(3):
        outcomes = await asyncio.gather(*(client.lookup(f"persistent://public/default/t{i}") for i in range(4)),
                                        return_exceptions=True)
        assert all(isinstance(o, ConnectError) for o in outcomes), outcomes
    await client.close()
    del outcomes
    assert messages(seen) == []
