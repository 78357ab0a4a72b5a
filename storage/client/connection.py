"""Pipelined connections to bookies: the thin asyncio wrapper around storage.protocol.

How this works
--------------
One ``BookieConnection`` (an ``asyncio.Protocol``) per bookie. Each request
gets a request id (rid) and a future; the encoded frame is appended to an
output buffer that is flushed once per event-loop iteration, so a burst of
adds costs one ``transport.write`` (one syscall) rather than one each.
Responses may arrive in any order and resolve the future with the same rid;
a non-zero status resolves it with the ``storage.errors`` class for that
code (``for_code``), raised exactly as the bookie reported it.

Timeouts: each request carries a deadline. Deadlines live in one FIFO per
timeout value (so each FIFO is sorted) and a single sweeper timer, armed
only while requests are outstanding, fails expired requests with
``BookieTimeoutError``. That avoids a timer per request on the add path.

Failures: losing the connection, a connect failure, or an unreadable frame
fails every outstanding request with ``BookieUnavailableError``; the
connection is then dead and ``BookiePool`` opens a fresh one on the next
request (lazy reconnect). An ``ErrorResponse`` fails its own request (or all
of them when it has no rid); the bookie closes the connection after it.

``BookiePool`` sends without awaiting: while a connection is still being
established its frames wait in the buffer, so callers on the fast path only
ever touch a future. A ``FaultPlan`` (storage.client.faults) may be attached
as the scripted-fault seam for tests.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from typing import Callable

from storage import protocol
from storage.client import faults as fault_ops
from storage.client.config import ClientConfig
from storage.client.pacing import BulkPacer, SmallAddBeacon
from storage.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    StorageError,
    for_code,
)

log = logging.getLogger(__name__)

_CONNECTING, _CONNECTED, _CLOSED = "connecting", "connected", "closed"
_GATHER_ABOVE = 256 * 1024  # a flush holding a piece this large sends the pieces unjoined, in slices
# Large entries go out at most this many bytes per turn of the event loop, and only while the transport has sent
# what it was given before. One 5 MiB entry handed to the transport at once was one send() of megabytes on the
# loop's thread, twice per message at Qw 2, and every other client's command on that loop waited behind it; in
# slices they wait behind one slice (the loop's longest CPU span while sending 5 MiB adds on loopback: 1.4-1.5 ms
# whole, 0.8 ms in slices; docs/hostile-clients.md).
_WRITE_SLICE_BYTES = 256 * 1024
BULK_ADD_BYTES = 256 * 1024  # adds this large go over each bookie's second connection (BookiePool)


class BookieConnection(asyncio.Protocol):
    """One TCP connection to one bookie, with pipelined requests."""

    def __init__(self, bookie_id: str, host: str, port: int, config: ClientConfig,
                 tls: ssl.SSLContext | None = None, pacer: BulkPacer | None = None):
        self.bookie_id = bookie_id
        self._pacer = pacer  # large adds only: the pause between slices while small adds flow (pacing.py)
        self.host = host
        self.port = port
        self._config = config
        self._tls = tls
        self._loop = asyncio.get_running_loop()
        self._decoder = protocol.FrameDecoder("client", config.max_frame_bytes)
        self._state = _CONNECTING
        self._transport: asyncio.Transport | None = None
        self._out: deque[bytes | memoryview] = deque()
        self._flush_scheduled = False
        self._writing_paused = False  # the transport holds a slice's worth unsent: resume_writing flushes on
        self._next_rid = 1
        self._pending: dict[int, asyncio.Future] = {}  # rid -> future
        self._deadlines: dict[float, deque] = {}  # timeout_s -> FIFO of (deadline, rid)
        self._sweeper: asyncio.TimerHandle | None = None
        self._connect_task = self._loop.create_task(self._connect())

    # ---- lifecycle ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    async def _connect(self) -> None:
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: self, self.host, self.port, ssl=self._tls,
                                             server_hostname=self.host if self._tls else None),
                self._config.connect_timeout_s,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            self._fail_all(BookieUnavailableError(f"cannot connect to bookie {self.bookie_id} at {self.host}:{self.port}: {exc!r}"))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._state == _CLOSED:  # closed while connecting
            transport.close()
            return
        self._transport = transport  # type: ignore[assignment]
        self._transport.set_write_buffer_limits(high=_WRITE_SLICE_BYTES, low=0)
        self._state = _CONNECTED
        if self._out and not self._flush_scheduled:
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(BookieUnavailableError(f"connection to bookie {self.bookie_id} lost" + (f": {exc!r}" if exc else "")))

    def close(self) -> None:
        self._fail_all(BookieUnavailableError(f"connection to bookie {self.bookie_id} closed by the client"))

    def _fail_all(self, exc: StorageError) -> None:
        self._state = _CLOSED
        if not self._connect_task.done() and self._connect_task is not asyncio.current_task():
            self._connect_task.cancel()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._out.clear()
        pending, self._pending = self._pending, {}
        self._deadlines.clear()
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(_copy(exc))

    # ---- requests ----------------------------------------------------------

    def request(self, make: Callable[[int], protocol.Request], timeout_s: float) -> asyncio.Future:
        """Send the request ``make(rid)``; the future resolves with its response."""
        fut = self._loop.create_future()
        if self._state == _CLOSED:
            fut.set_exception(BookieUnavailableError(f"connection to bookie {self.bookie_id} is closed"))
            return fut
        rid = self._next_rid
        self._next_rid = rid + 1
        req = make(rid)
        self._pending[rid] = fut
        self._out.extend(protocol.encode_parts(req))
        if not self._flush_scheduled and self._state == _CONNECTED:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        fifo = self._deadlines.get(timeout_s)
        if fifo is None:
            fifo = self._deadlines[timeout_s] = deque()
        fifo.append((time.monotonic() + timeout_s, rid))
        if self._sweeper is None:
            self._arm_sweeper()
        return fut

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._state != _CONNECTED or not self._out or self._writing_paused:
            return
        out = self._out
        if not any(len(piece) >= _GATHER_ABOVE for piece in out):
            self._transport.write(b"".join(out))
            out.clear()
            return
        # Large entries are sent from where they are, never joined, one slice per turn (see _WRITE_SLICE_BYTES).
        room = _WRITE_SLICE_BYTES
        while out and room > 0:
            piece = out.popleft()
            if len(piece) > room:
                view = memoryview(piece)
                out.appendleft(view[room:])
                piece = view[:room]
            self._transport.write(piece)
            room -= len(piece)
        if out and not self._writing_paused:
            self._flush_scheduled = True
            gap = 0.0
            if self._pacer is not None and self._pacer.active():  # what waits is counted only then
                gap = self._pacer.gap_s(_WRITE_SLICE_BYTES - room, sum(map(len, out)))
            if gap > 0:
                self._loop.call_later(gap, self._flush)
            else:
                self._loop.call_soon(self._flush)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._out and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _arm_sweeper(self) -> None:
        shortest = min(self._deadlines) if self._deadlines else 1.0
        tick = max(0.005, min(0.1, shortest / 8))
        self._sweeper = self._loop.call_later(tick, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = time.monotonic()
        for timeout_s, fifo in list(self._deadlines.items()):
            while fifo and (fifo[0][0] <= now or fifo[0][1] not in self._pending):
                _, rid = fifo.popleft()
                fut = self._pending.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_exception(
                        BookieTimeoutError(f"bookie {self.bookie_id} did not answer within {timeout_s:g}s")
                    )
            if not fifo:
                del self._deadlines[timeout_s]
        if self._pending and self._state != _CLOSED:
            self._arm_sweeper()

    # ---- responses ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        try:
            responses = self._decoder.feed(data)
        except StorageError as exc:
            self._fail_all(BookieUnavailableError(f"unreadable response from bookie {self.bookie_id}: {exc}"))
            return
        pending = self._pending
        for resp in responses:
            if type(resp) is protocol.ErrorResponse:
                self._error_response(resp)
                continue
            fut = pending.pop(resp.rid, None)
            if fut is None or fut.done():  # already timed out or cancelled
                continue
            if resp.status == protocol.OK:
                fut.set_result(resp)
            else:
                fut.set_exception(for_code(resp.status, f"bookie {self.bookie_id}: {_describe(resp)}"))

    def _error_response(self, resp: protocol.ErrorResponse) -> None:
        exc = for_code(resp.status, f"bookie {self.bookie_id} rejected a request: {resp.message}")
        fut = self._pending.pop(resp.rid, None) if resp.rid != -1 else None
        if fut is not None:
            if not fut.done():
                fut.set_exception(exc)
        else:
            self._fail_all(BookieUnavailableError(f"bookie {self.bookie_id} reported a protocol error: {resp.message}"))


def _describe(resp) -> str:
    ledger = getattr(resp, "ledger_id", "?")
    entry = getattr(resp, "entry_id", None)
    return f"ledger {ledger}" + (f" entry {entry}" if entry is not None else "")


def _copy(exc: StorageError) -> StorageError:
    # One exception instance per future: a shared instance would accumulate
    # tracebacks from every awaiting coroutine.
    return type(exc)(*exc.args)


def _failed(loop: asyncio.AbstractEventLoop, exc: BaseException) -> asyncio.Future:
    fut = loop.create_future()
    fut.set_exception(exc)
    return fut


class BookiePool:
    """Connections by bookie id, opened lazily and replaced after they die.

    ``resolve(bookie_id) -> (host, port)`` maps an id to an address (the
    registry's view, falling back to parsing the id). Every method returns a
    future without awaiting: the add fast path never yields here.
    """

    def __init__(
        self,
        config: ClientConfig,
        resolve: Callable[[str], tuple[str, int]],
        faults: fault_ops.FaultPlan | None = None,
        tls: ssl.SSLContext | None = None,
    ):
        self._config = config
        self._resolve = resolve
        self._tls = tls
        self._conns: dict[str, BookieConnection] = {}
        # A second connection per bookie carries the large adds (BULK_ADD_BYTES and up), so a small add is never
        # queued on a TCP stream behind megabytes of another ledger's entries: the bookie reads a 5 MiB frame in
        # tens of socket reads, one per turn of its loop, before it reaches what follows (BookKeeper's client
        # likewise spreads requests over several channels per bookie). Nothing relies on order across the two:
        # the bookie takes a ledger's entries in any order and the ledger handle completes adds in order.
        self._bulk: dict[str, BookieConnection] = {}
        beacon = SmallAddBeacon(config.small_add_beacon_path) if config.small_add_beacon_path else None
        self.pacer = BulkPacer(config.bulk_add_pace_bytes_per_s, beacon=beacon)  # for the large adds' connections
        self.faults = faults
        self._closed = False

    def connection(self, bookie_id: str, *, bulk: bool = False) -> BookieConnection:
        conns = self._bulk if bulk else self._conns
        conn = conns.get(bookie_id)
        if conn is None or conn.closed:
            if self._closed:
                raise BookieUnavailableError("the bookie pool is closed")
            try:
                host, port = self._resolve(bookie_id)
            except ValueError as exc:
                raise BookieUnavailableError(f"no address for bookie {bookie_id}: {exc}") from exc
            conn = conns[bookie_id] = BookieConnection(bookie_id, host, port, self._config, self._tls,
                                                       self.pacer if bulk else None)
        return conn

    def _send(self, bookie_id: str, op: str, make, timeout_s: float, args: tuple, *, bulk: bool = False) -> asyncio.Future:
        if self.faults is not None:
            verdict = self.faults.intercept(bookie_id, op, args)
            if verdict is not None:
                return self._apply(verdict, bookie_id, op, make, timeout_s, bulk)
        try:
            return self.connection(bookie_id, bulk=bulk).request(make, timeout_s)
        except StorageError as exc:
            return _failed(asyncio.get_running_loop(), exc)

    def _apply(self, verdict: fault_ops.Verdict, bookie_id, op, make, timeout_s, bulk: bool = False) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if verdict.hold is None and verdict.exc is not None:
            return _failed(loop, verdict.exc)
        outer = loop.create_future()

        def deliver(inner: asyncio.Future) -> None:
            if outer.done():
                return
            if inner.exception() is not None:
                outer.set_exception(inner.exception())
                return
            resp = inner.result()
            if verdict.corrupt:
                resp = _corrupt_response(resp)
            outer.set_result(resp)

        def go(gate: asyncio.Future | None = None) -> None:
            if gate is not None and gate.exception() is not None:
                if not outer.done():
                    outer.set_exception(gate.exception())
                return
            if verdict.exc is not None:  # held, then failed as scripted
                if not outer.done():
                    outer.set_exception(verdict.exc)
                return
            try:
                inner = self.connection(bookie_id, bulk=bulk).request(make, timeout_s)
            except StorageError as exc:
                inner = _failed(loop, exc)
            inner.add_done_callback(deliver)

        if verdict.hold is not None:
            verdict.hold.gate.add_done_callback(go)
        else:
            go()
        return outer

    # ---- operations --------------------------------------------------------

    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False) -> asyncio.Future:
        flags = protocol.FLAG_RECOVERY if recovery else 0
        bulk = len(body) >= BULK_ADD_BYTES
        if not bulk:
            self.pacer.small_add()
        return self._send(
            bookie_id, fault_ops.RECOVERY_ADD if recovery else fault_ops.ADD,
            lambda rid: protocol.AddRequest(rid, ledger_id, entry_id, flags, master_key, body),
            self._config.add_entry_timeout_s, (ledger_id, entry_id), bulk=bulk,
        )

    def read(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False, master_key: bytes = b"") -> asyncio.Future:
        """Future of the ReadResponse (``.body`` is the packaged entry)."""
        flags = protocol.FLAG_FENCE if fence else 0
        return self._send(
            bookie_id, fault_ops.FENCE_READ if fence else fault_ops.READ,
            lambda rid: protocol.ReadRequest(rid, ledger_id, entry_id, flags, master_key),
            self._config.read_timeout_s, (ledger_id, entry_id),
        )

    def read_lac(self, bookie_id: str, ledger_id: int) -> asyncio.Future:
        return self._send(
            bookie_id, fault_ops.READ_LAC, lambda rid: protocol.ReadLacRequest(rid, ledger_id),
            self._config.read_timeout_s, (ledger_id,),
        )

    def batch_read(self, bookie_id: str, ledger_id: int, first: int, last: int, max_bytes: int) -> asyncio.Future:
        return self._send(
            bookie_id, fault_ops.BATCH_READ,
            lambda rid: protocol.BatchReadRequest(rid, ledger_id, first, last, max_bytes),
            self._config.read_timeout_s, (ledger_id, first, last),
        )

    def drop(self, bookie_id: str) -> None:
        """Close the connection to a bookie (its requests fail as unavailable)."""
        for conns in (self._conns, self._bulk):
            conn = conns.pop(bookie_id, None)
            if conn is not None:
                conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = [*self._conns.values(), *self._bulk.values()]
        self._conns, self._bulk = {}, {}
        for conn in conns:
            conn.close()
        # Let the transports' close callbacks run before the loop may stop.
        await asyncio.sleep(0)


def _corrupt_response(resp):
    if type(resp) is protocol.ReadResponse and resp.body is not None:
        return protocol.ReadResponse(resp.rid, resp.status, resp.ledger_id, resp.entry_id, fault_ops.corrupt(resp.body))
    if type(resp) is protocol.BatchReadResponse and resp.bodies:
        return protocol.BatchReadResponse(resp.rid, resp.status, resp.ledger_id, [fault_ops.corrupt(b) for b in resp.bodies])
    return resp
