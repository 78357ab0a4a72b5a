"""A fault-injecting TCP proxy on loopback: network partitions for real-process tests and the nemesis.

How this works
--------------
One proxy process (``python -m storage.testing.netproxy --control-port P``)
holds any number of *links*: a loopback listen port forwarding to one
server's real port. The launcher puts a link in front of each server (a
bookie advertises its link's port, a broker its link in
``advertisedListeners``, every process dials ZooKeeper through its link), so
every peer reaches every server through the proxy.

A partition is a set of *rules*: held links (every connection to that
server) and held client processes (every connection a process opened, on any
link; the proxy tells which process owns the client end of a loopback
connection from ``/proc/net/tcp`` and ``/proc/<pid>/fd``). Isolating process P
holds P's own link and P's pid: nothing reaches P, nothing from P reaches
anyone, and ZooKeeper included.

A held connection is blackholed, not refused: the proxy stops forwarding and
stops reading both ends, and keeps both sockets open, so peers see silence and
find out only by their own timeouts -- what a dropped-packet partition looks
like. Bytes already read are kept and delivered in order when the rule is
lifted, as TCP's retransmissions would after a short partition. New
connections to a held link are accepted and held the same way.

Why a proxy and not network namespaces: it needs no root, carries only
loopback traffic, and can cut one process off while its server keeps its
address (a restarted process dials the same ports). See docs/nemesis.md.

Control (JSON over HTTP on the control port, loopback only)::

    GET  /health                  200 "OK"
    POST /links                   {"name", "listen_port", "target_port"} -> 201
    GET  /links                   {"links": {name: {listen_port, target_port, connections, held}}, "rules": ...}
    PUT  /rules                   {"links": [name...], "pids": [pid...]}  (replaces the rules; {} heals all)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field

from aiohttp import web

log = logging.getLogger("netproxy")

# Bytes kept per side while the other side cannot take them (not yet connected); past it the
# proxy stops reading that side, so this bounds memory per connection.
_HELD_BUFFER_BYTES = 4 * 1024 * 1024
MAX_LINKS = 256


@dataclass(frozen=True)
class Rules:
    """What is partitioned: connections to these links, and connections opened by these processes."""

    links: frozenset[str] = frozenset()
    pids: frozenset[int] = frozenset()


def is_held(link: str, client_pid: int | None, rules: Rules) -> bool:
    """Whether a connection on ``link`` whose client end belongs to ``client_pid`` (None: unknown) is held."""
    return link in rules.links or (client_pid is not None and client_pid in rules.pids)


def loopback_sockets(text: str) -> dict[tuple[int, int], int]:
    """(local port, remote port) -> socket inode, for every TCP socket in ``/proc/net/tcp`` text.

    Addresses there are hex ``IP:PORT``; the inode is the 10th column. Only ports are kept: the proxy
    serves loopback only, so a client end is told by its port and the link's port.
    """
    out = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10:
            continue
        try:
            out[(int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16))] = int(cols[9])
        except ValueError:
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    """The socket inodes process ``pid`` holds descriptors on (empty if it exited)."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def owners(pids) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """One look at the kernel's tables: (socket table, inode -> owning pid among ``pids``). Blocking: run it
    off the event loop (reading /proc/net/tcp takes tens of milliseconds on a busy machine)."""
    try:
        with open("/proc/net/tcp") as fh:
            table = loopback_sockets(fh.read())
    except OSError:
        table = {}
    return table, {inode: pid for pid in pids for inode in socket_inodes(pid)}


class _Side(asyncio.Protocol):
    """One socket of a proxied connection; forwards to its peer side unless the connection is held."""

    def __init__(self, conn: "_Connection", on_made=None):
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.peer: "_Side | None" = None
        self.pending = bytearray()  # read while held (or before the other side connected), written on release
        self.reading = True
        self.peer_blocked = False  # the other side's socket cannot take more: stop reading this one
        self._on_made = on_made

    def connection_made(self, transport):
        self.transport = transport
        if self._on_made is not None:
            self._on_made()

    def data_received(self, data: bytes) -> None:
        if self.conn.held or self.peer is None or self.peer.transport is None:
            self.pending += data
        else:
            self.peer.transport.write(data)
        self.sync()

    def eof_received(self):
        return False  # close this side; connection_lost then closes the other

    def connection_lost(self, exc):
        self.conn.close()

    def pause_writing(self):
        if self.peer is not None:
            self.peer.peer_blocked = True
            self.peer.sync()

    def resume_writing(self):
        if self.peer is not None:
            self.peer.peer_blocked = False
            self.peer.sync()

    def flush(self) -> None:
        if not self.conn.held and self.pending and self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(bytes(self.pending))
            self.pending.clear()
        self.sync()

    def sync(self) -> None:
        """Read from this socket exactly when the bytes can go somewhere."""
        t = self.transport
        if t is None or t.is_closing():
            return
        want = not self.conn.held and not self.peer_blocked and len(self.pending) < _HELD_BUFFER_BYTES
        if want != self.reading:
            (t.resume_reading if want else t.pause_reading)()
            self.reading = want


@dataclass(eq=False)
class _Connection:
    link: "Link"
    client_port: int
    client: _Side | None = None
    server: _Side | None = None
    client_pid: int | None = None  # the owner of the client end, once found among isolated processes
    not_among: frozenset[int] = frozenset()  # isolated processes already known not to own it
    held: bool = False
    closed: bool = False

    def sides(self) -> list[_Side]:
        return [s for s in (self.client, self.server) if s is not None]

    def hold(self) -> None:
        self.held = True
        for side in self.sides():
            side.sync()

    def release(self) -> None:
        self.held = False
        for side in self.sides():
            side.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.link.connections.discard(self)
        for side in self.sides():
            if side.transport is not None:
                side.transport.close()


@dataclass(eq=False)
class Link:
    name: str
    listen_port: int
    target_port: int
    server: asyncio.AbstractServer | None = None
    connections: set[_Connection] = field(default_factory=set)


class Proxy:
    """The links and the rules; runs on one event loop."""

    def __init__(self):
        self.links: dict[str, Link] = {}
        self.rules = Rules()
        self._tasks: set[asyncio.Task] = set()  # upstream connects under way (the loop keeps only weak references)

    async def add_link(self, name: str, listen_port: int, target_port: int) -> Link:
        """Raises ValueError for a duplicate name or too many links, OSError when the port is taken."""
        if name in self.links:
            raise ValueError(f"link {name!r} exists")
        if len(self.links) >= MAX_LINKS:
            raise ValueError(f"at most {MAX_LINKS} links")
        link = Link(name, listen_port, target_port)
        loop = asyncio.get_running_loop()
        link.server = await loop.create_server(lambda: self._accepted(link), "127.0.0.1", listen_port,
                                               reuse_address=True)
        self.links[name] = link
        return link

    def _accepted(self, link: Link) -> _Side:
        conn = _Connection(link, client_port=0)
        loop = asyncio.get_running_loop()
        side = _Side(conn, on_made=lambda: self._spawn(loop.create_task(self._open_upstream(conn))))
        conn.client = side
        link.connections.add(conn)
        return side

    def _spawn(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_upstream(self, conn: _Connection) -> None:
        client = conn.client
        peer = client.transport.get_extra_info("peername") if client.transport else None
        conn.client_port = peer[1] if peer else 0
        if self.rules.pids:
            conn.hold()  # until we know whether an isolated process opened it
            await self._resolve([conn], self.rules.pids)
        conn.held = is_held(conn.link.name, conn.client_pid, self.rules)
        if conn.held:
            conn.hold()
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(lambda: _Side(conn), "127.0.0.1", conn.link.target_port)
        except OSError:
            conn.close()  # the server is down: the client sees its connection closed, as a dead host's RST
            return
        if conn.closed:
            server.transport.close()
            return
        conn.server = server
        client.peer, server.peer = server, client
        conn.held = is_held(conn.link.name, conn.client_pid, self.rules)  # the rules may have changed meanwhile
        if conn.held:
            conn.hold()
        else:
            conn.release()

    @staticmethod
    async def _resolve(conns: list[_Connection], pids: frozenset[int]) -> None:
        """Find which of ``pids`` opened each of ``conns``, where not known yet."""
        todo = [c for c in conns if c.client_pid is None and not pids <= c.not_among]
        if not todo:
            return
        table, owned = await asyncio.to_thread(owners, pids)
        for conn in todo:
            inode = table.get((conn.client_port, conn.link.listen_port))
            conn.client_pid = owned.get(inode) if inode is not None else None
            if conn.client_pid is None:
                conn.not_among = conn.not_among | pids

    async def set_rules(self, rules: Rules) -> None:
        conns = [c for link in self.links.values() for c in link.connections]
        if rules.pids:
            await self._resolve(conns, rules.pids)
        self.rules = rules
        for conn in conns:
            if conn.closed or conn.server is None:
                continue  # still connecting: _open_upstream decides under the new rules
            conn.held = is_held(conn.link.name, conn.client_pid, rules)
            if conn.held:
                conn.hold()
            else:
                conn.release()

    def describe(self) -> dict:
        return {
            "links": {
                name: {"listen_port": link.listen_port, "target_port": link.target_port,
                       "connections": len(link.connections), "held": sum(c.held for c in link.connections)}
                for name, link in self.links.items()
            },
            "rules": {"links": sorted(self.rules.links), "pids": sorted(self.rules.pids)},
        }

    async def close(self) -> None:
        for link in self.links.values():
            link.server.close()
            for conn in list(link.connections):
                conn.close()


PROXY = web.AppKey("proxy", Proxy)


def _app(proxy: Proxy) -> web.Application:
    app = web.Application()
    app[PROXY] = proxy
    app.add_routes([web.get("/health", _health), web.get("/links", _links), web.post("/links", _add_link),
                    web.put("/rules", _set_rules)])
    return app


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def _links(request: web.Request) -> web.Response:
    return web.json_response(request.app[PROXY].describe())


def _port(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError(f"{what} must be a port number in 1..65535")
    return value


async def _add_link(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        name = body["name"]
        if not isinstance(name, str) or not 0 < len(name) <= 128:
            raise ValueError("name must be a string of 1..128 characters")
        link = await request.app[PROXY].add_link(name, _port(body["listen_port"], "listen_port"),
                                                 _port(body["target_port"], "target_port"))
    except (ValueError, KeyError, TypeError) as exc:
        return web.json_response({"error": f"bad link: {exc}"}, status=400)
    except OSError as exc:
        return web.json_response({"error": f"cannot listen: {exc}"}, status=409)
    return web.json_response({"name": link.name, "listen_port": link.listen_port}, status=201)


async def _set_rules(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    try:
        body = await request.json()
        links = body.get("links", [])
        pids = body.get("pids", [])
        if not isinstance(links, list) or any(name not in proxy.links for name in links):
            raise ValueError(f"links must name existing links, got {links!r}")
        if not isinstance(pids, list) or any(isinstance(p, bool) or not isinstance(p, int) or p <= 0 for p in pids):
            raise ValueError(f"pids must be positive integers, got {pids!r}")
    except (ValueError, AttributeError, TypeError) as exc:
        return web.json_response({"error": f"bad rules: {exc}"}, status=400)
    await proxy.set_rules(Rules(frozenset(links), frozenset(pids)))
    return web.json_response(proxy.describe())


async def serve(control_port: int) -> None:
    proxy = Proxy()
    runner = web.AppRunner(_app(proxy), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", control_port, reuse_address=True).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"netproxy control on 127.0.0.1:{control_port}", flush=True)
    await stop.wait()
    await proxy.close()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.testing.netproxy", description=__doc__.split("\n")[0])
    parser.add_argument("--control-port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    asyncio.run(serve(args.control_port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
