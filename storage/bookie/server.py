"""The bookie's network side: storage/protocol.py frames in, Bookie core calls, responses out.

How this works:

* One ``BookieConnection`` (an asyncio Protocol) per client connection feeds
  bytes to the pure ``FrameDecoder`` and runs each request as its own task,
  so requests pipeline and responses leave in completion order, each with
  its request id. A connection with too many requests in flight, or with
  a write buffer over its high-water mark (a client not reading its
  responses), stops reading until it is below both (backpressure instead
  of an unbounded task pile or buffer).
* Every request's fields are checked first (``protocol.bounded``): an
  impossible value is answered ``BadRequest`` on that request alone; a
  BATCH_READ asking for more than ``max_batch_read_size_bytes`` /
  ``max_batch_read_entries`` gets a shorter batch.
* Malformed or oversized input gets one ``ErrorResponse`` frame naming the
  problem, then that connection -- and only that one -- is closed.
* Master keys: the core checks every add and fence against the key it
  recorded for the ledger. Before it has one (the first add or fence of a
  ledger here), the presented key is checked against the ledger's metadata
  (``master_key(md.password)``), so nobody without the password can fence a
  ledger a bookie has not heard of yet, nor plant a key that would lock out
  its writer. A ledger with no metadata cannot be fenced here either.
* Adds pass the ``LedgerGate`` first. The bookie learns a ledger's state
  from its metadata the first time it sees the ledger and keeps it fresh
  with a data watch: an add to a ledger with no metadata fails
  ``NoSuchLedger``; an add to a CLOSED ledger fails ``LedgerClosed`` (a
  stray writer after close), unless it is a recovery add.
  A closed ledger's cached state needs no watch (CLOSED is terminal).
* Read-only mode (disk nearly full, operator override, failed journal;
  see disk_monitor.py) refuses adds with ``BookieReadOnly`` but accepts
  recovery adds. Decision: do as BookKeeper does with high-priority
  (recovery) writes on a read-only bookie. Refusing them would let one
  nearly-full disk block the recovery of every ledger whose last ensemble
  includes this bookie, and the threshold (95 % by default) leaves the
  headroom such rare writes need. A failed journal refuses them anyway (the
  core answers ``BookieInternalError``). Reads are always served.
* ``bookie_server_connections`` (gauge) and ``..._connections_accepted``
  (counter) track connections for /metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import OrderedDict, deque
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from storage import protocol as p
from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.errors import (
    BookieInternalError,
    BookieReadOnlyError,
    BookieShuttingDownError,
    FrameTooLargeError,
    LedgerClosedError,
    LedgerMetadataError,
    MalformedRequestError,
    MetadataError,
    NoNodeError,
    NoSuchLedgerError,
    StorageError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key
from storage.metadata import MetadataStore, Watch, paths
from storage.tls import server_context

log = logging.getLogger(__name__)

CLOSED_CACHE_SIZE = 100_000


class LedgerGate:
    """Which ledgers may take normal adds, from their metadata (cached, kept fresh by watches).

    OPEN and IN_RECOVERY ledgers are cached with a data watch, so a closure
    or deletion reaches the bookie without a read per add. CLOSED is terminal
    (only deletion follows, and a deleted ledger refuses adds just the same),
    so a closed ledger drops its watch and sits in a bounded LRU: a bookie
    that has seen millions of ledgers holds neither millions of watches nor
    an unbounded cache. A ledger evicted from it is simply read again.
    """

    def __init__(self, store: MetadataStore, closed_cache_size: int = CLOSED_CACHE_SIZE):
        self._store = store
        self._live: dict[int, LedgerState] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()
        self._closed_cache_size = closed_cache_size
        self._loading: dict[int, asyncio.Future] = {}
        self._watches: dict[int, Watch] = {}
        # Master keys from metadata, for ledgers whose key the core has not recorded yet (immutable per ledger).
        self._keys: OrderedDict[int, bytes] = OrderedDict()

    def allows(self, ledger_id: int, recovery: bool) -> bool:
        """Fast path: True when the cached state lets this add through without a metadata read."""
        return ledger_id in self._live or (recovery and ledger_id in self._closed)

    def state(self, ledger_id: int) -> LedgerState | None:
        """The cached state (None: not cached)."""
        return LedgerState.CLOSED if ledger_id in self._closed else self._live.get(ledger_id)

    @property
    def watched(self) -> int:
        return len(self._watches)

    async def check(self, ledger_id: int, recovery: bool) -> None:
        """Raises NoSuchLedgerError, LedgerClosedError, or a MetadataError when the store is unreachable."""
        state = self.state(ledger_id)
        if state is None:
            state = await self._load(ledger_id)
        elif ledger_id in self._closed:
            self._closed.move_to_end(ledger_id)  # LRU: recently used closed ledgers stay cached
        if state is LedgerState.CLOSED and not recovery:
            raise LedgerClosedError(f"ledger {ledger_id} is closed")

    async def master_key(self, ledger_id: int) -> bytes:
        """The master key the ledger's metadata implies. Raises NoSuchLedgerError, MetadataError."""
        for _ in range(2):  # a deletion (or, rarely, eviction) between the load and the lookup: load again
            key = self._keys.get(ledger_id)
            if key is not None:
                return key
            await self._load(ledger_id)
        key = self._keys.get(ledger_id)
        if key is None:
            raise NoSuchLedgerError(f"ledger {ledger_id}'s metadata went away while its master key was checked")
        return key

    async def _load(self, ledger_id: int) -> LedgerState:
        # Concurrent first adds of one ledger share one metadata read.
        pending = self._loading.get(ledger_id)
        if pending is None:
            pending = self._loading[ledger_id] = asyncio.ensure_future(self._read(ledger_id))
            pending.add_done_callback(lambda _f: self._loading.pop(ledger_id, None))
        return await asyncio.shield(pending)

    async def _read(self, ledger_id: int) -> LedgerState:
        path = paths.ledger_path(ledger_id)
        # Watch first, then read: every change after the read is notified (api.py).
        if ledger_id not in self._watches:
            self._watches[ledger_id] = self._store.watch_data(path, lambda _e: self._refresh(ledger_id))
        try:
            data, _ = await self._store.get(path)
            md = LedgerMetadata.from_bytes(data)
            state = md.state
        except NoNodeError:
            self._forget(ledger_id)
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata: it was never created or has been deleted")
        except LedgerMetadataError as exc:
            self._forget(ledger_id)
            raise NoSuchLedgerError(f"ledger {ledger_id} has unreadable metadata: {exc}") from exc
        except BaseException:
            self._forget(ledger_id)  # store unreachable: read again next time rather than trust nothing
            raise
        if state is LedgerState.CLOSED:
            self._forget(ledger_id)
            self._closed[ledger_id] = None
            while len(self._closed) > self._closed_cache_size:
                self._closed.popitem(last=False)
        else:
            self._live[ledger_id] = state
        self._keys[ledger_id] = master_key(md.password)
        self._keys.move_to_end(ledger_id)
        while len(self._keys) > self._closed_cache_size:
            self._keys.popitem(last=False)
        return state

    def _refresh(self, ledger_id: int) -> None:
        if ledger_id in self._live:
            task = asyncio.ensure_future(self._read(ledger_id))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # outcome is in the cache

    def _forget(self, ledger_id: int) -> None:
        self._live.pop(ledger_id, None)
        self._closed.pop(ledger_id, None)
        self._keys.pop(ledger_id, None)
        watch = self._watches.pop(ledger_id, None)
        if watch is not None:
            watch.cancel()

    def close(self) -> None:
        for ledger_id in list(self._watches):
            self._forget(ledger_id)
        self._closed.clear()


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.connections = Gauge("bookie_server_connections", "Open client connections", registry=registry)
        self.accepted = Counter("bookie_server_connections_accepted", "Client connections accepted",
                                registry=registry)
        self.requests = Counter("bookie_server_requests", "Requests answered, by op and status", ["op", "status"],
                                registry=registry)
        self.protocol_errors = Counter("bookie_server_protocol_errors", "Connections closed for bad input", ["reason"],
                                       registry=registry)
        self.read_only = Gauge("bookie_read_only", "1 while the bookie refuses writes", registry=registry)
        self.write_buffer_max = Gauge("bookie_server_write_buffer_max_bytes",
                                      "The largest count of response bytes waiting for one connection's client",
                                      registry=registry)


_OP_NAMES = {p.ADD: "add", p.READ: "read", p.READ_LAC: "read_lac", p.BATCH_READ: "batch_read"}
_OP_BY_TYPE = {p.AddResponse: p.ADD, p.ReadResponse: p.READ, p.ReadLacResponse: p.READ_LAC,
               p.BatchReadResponse: p.BATCH_READ}


class BookieServer:
    """Serves one Bookie core on a TCP port. ``await BookieServer.start(...)``, ``await server.stop()``."""

    def __init__(self, bookie: Bookie, store: MetadataStore, config: BookieConfig, registry: CollectorRegistry):
        self.bookie = bookie
        self.config = config
        self.gate = LedgerGate(store)
        self.limits = config.request_limits
        self.metrics = ServerMetrics(registry)
        self.metrics.write_buffer_max.set_function(
            lambda: max((conn.write_buffer_bytes for conn in list(self._connections)), default=0))
        self.read_only = False
        self.read_only_reason = ""
        self._connections: set[BookieConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._stopping = False
        # Called (on the loop) when an add finds the journal failed, so the service goes read-only now
        # rather than at its next periodic disk check (writers would keep choosing it meanwhile).
        self.on_journal_failure: Callable[[], None] | None = None

    @classmethod
    async def start(cls, bookie, store, config, registry) -> "BookieServer":
        server = cls(bookie, store, config, registry)
        tls = (server_context(config.tls_certificate_path, config.tls_key_store, config.tls_trust_store,
                              config.tls_client_authentication) if config.tls_enabled else None)
        loop = asyncio.get_running_loop()
        server._server = await loop.create_server(lambda: BookieConnection(server), config.host, config.port,
                                                  reuse_address=True, ssl=tls)
        return server

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    def set_read_only(self, read_only: bool, reason: str = "") -> None:
        self.read_only = read_only
        self.read_only_reason = reason
        self.metrics.read_only.set(1 if read_only else 0)

    async def handle(self, request: p.Request) -> p.Response:
        """Run one request against the core; every StorageError becomes its status code."""
        try:
            request = p.bounded(request, self.limits)
            if self._stopping:
                raise BookieShuttingDownError("bookie is shutting down")
            if type(request) is p.AddRequest:
                return await self._add(request)
            if type(request) is p.ReadRequest:
                if request.fence:
                    if not self.bookie.knows_key(request.ledger_id):
                        await self._check_first_key(request.ledger_id, request.master_key)
                    body = await self.bookie.fencing_read(request.ledger_id, request.entry_id, request.master_key)
                else:
                    body = await self.bookie.read_entry(request.ledger_id, request.entry_id)
                return p.ReadResponse(request.rid, p.OK, request.ledger_id, request.entry_id, body)
            if type(request) is p.ReadLacRequest:
                return p.ReadLacResponse(request.rid, p.OK, request.ledger_id, self.bookie.read_lac(request.ledger_id))
            bodies = await self.bookie.read_range(request.ledger_id, request.first_entry_id, request.last_entry_id,
                                                  request.max_bytes)
            return p.BatchReadResponse(request.rid, p.OK, request.ledger_id, bodies)
        except MetadataError as exc:
            # The gate could not reach the metadata store. MetadataError is a
            # StorageError, but its codes mean nothing to a bookie client:
            # report a (retriable) bookie-side failure instead.
            log.warning("metadata error serving %s for ledger %s: %s", type(request).__name__,
                        request.ledger_id, exc)
            return _error_response(request, BookieInternalError.code)
        except StorageError as exc:
            return _error_response(request, exc.code)
        except Exception:
            log.exception("internal error serving %s", type(request).__name__)
            return _error_response(request, BookieInternalError.code)

    async def _add(self, request: p.AddRequest) -> p.AddResponse:
        if self.read_only and not request.recovery:
            raise BookieReadOnlyError(f"bookie {self.config.bookie_id} is read-only: {self.read_only_reason}")
        if not self.gate.allows(request.ledger_id, request.recovery):
            await self.gate.check(request.ledger_id, request.recovery)
        if not self.bookie.knows_key(request.ledger_id):
            await self._check_first_key(request.ledger_id, request.master_key)
        try:
            await self.bookie.add_entry(request.ledger_id, request.entry_id, request.body, request.master_key,
                                        request.recovery)
        except StorageError:
            if self.bookie.journal_failed is not None and self.on_journal_failure is not None:
                self.on_journal_failure()
            raise
        return p.AddResponse(request.rid, p.OK, request.ledger_id, request.entry_id)

    async def _check_first_key(self, ledger_id: int, key: bytes) -> None:
        """Before the core has a key for this ledger (once it has, the core compares), the one
        presented must be the metadata's."""
        if not hmac.compare_digest(await self.gate.master_key(ledger_id), key):
            raise UnauthorizedError(f"wrong master key for ledger {ledger_id}")

    async def stop(self) -> None:
        """Stop accepting, answer in-flight requests, close connections."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        await asyncio.gather(*(conn.drain_and_close() for conn in list(self._connections)))
        if self._server is not None:
            await self._server.wait_closed()
        self.gate.close()


def _error_response(request: p.Request, status: int) -> p.Response:
    if type(request) is p.AddRequest:
        return p.AddResponse(request.rid, status, request.ledger_id, request.entry_id)
    if type(request) is p.ReadRequest:
        return p.ReadResponse(request.rid, status, request.ledger_id, request.entry_id, None)
    if type(request) is p.ReadLacRequest:
        return p.ReadLacResponse(request.rid, status, request.ledger_id, -1)
    return p.BatchReadResponse(request.rid, status, request.ledger_id, [])


# What a request may cost in memory while it is served, charged against max_bytes_in_flight_per_connection
# before it starts: an add holds its body, a batch read at most its (capped) max_bytes. A single READ's entry size
# is unknown until it is read; it is charged a typical entry's worth, so the budget also caps how many run at once.
READ_CHARGE_BYTES = 256 * 1024


def request_charge(request: p.Request, limits: p.RequestLimits) -> int:
    kind = type(request)
    if kind is p.AddRequest:
        return len(request.body) + len(request.master_key)
    if kind is p.BatchReadRequest:
        return max(0, min(request.max_bytes, limits.max_batch_read_bytes))
    if kind is p.ReadRequest:
        return READ_CHARGE_BYTES
    return 0


class BookieConnection(asyncio.Protocol):
    """One client connection. Requests decoded from a read wait in ``backlog`` and start only while the
    connection has fewer than ``max_requests_in_flight_per_connection`` in flight, their charges
    (``request_charge``) fit ``max_bytes_in_flight_per_connection``, and the transport's write buffer is under
    its high-water mark; while anything is held back, nothing more is read. So a client that pipelines without
    end, or never reads its responses, costs the bookie one read's worth of waiting requests, the budget in
    flight and one high-water mark of responses -- not an ever-growing buffer."""

    def __init__(self, server: BookieServer):
        self.server = server
        self.decoder = p.FrameDecoder("server", server.config.max_frame_bytes)
        self.max_in_flight = server.config.max_requests_in_flight_per_connection
        self.max_bytes_in_flight = server.config.max_bytes_in_flight_per_connection
        self.transport: asyncio.Transport | None = None
        self.in_flight: dict[asyncio.Task, int] = {}  # task -> its charge
        self.bytes_in_flight = 0
        self.backlog: deque[p.Request] = deque()
        self.writable = True
        self.paused = False
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server._connections.add(self)
        self.server.metrics.connections.inc()
        self.server.metrics.accepted.inc()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.backlog.clear()
        if self in self.server._connections:
            self.server._connections.discard(self)
            self.server.metrics.connections.dec()

    def data_received(self, data: bytes) -> None:
        try:
            requests = self.decoder.feed(data)
        except (MalformedRequestError, FrameTooLargeError) as exc:
            self._reject(exc)
            return
        self.backlog.extend(requests)
        self._start_backlog()

    def pause_writing(self) -> None:
        self.writable = False
        self._set_reading()

    def resume_writing(self) -> None:
        self.writable = True
        self._start_backlog()

    @property
    def write_buffer_bytes(self) -> int:
        return 0 if self.transport is None or self.closed else self.transport.get_write_buffer_size()

    def _start_backlog(self) -> None:
        while self.backlog and self.writable and len(self.in_flight) < self.max_in_flight and not self.closed:
            charge = request_charge(self.backlog[0], self.server.limits)
            # A request larger than the whole budget still runs, alone.
            if self.in_flight and self.bytes_in_flight + charge > self.max_bytes_in_flight:
                break
            task = asyncio.ensure_future(self.server.handle(self.backlog.popleft()))
            self.in_flight[task] = charge
            self.bytes_in_flight += charge
            task.add_done_callback(self._answered)
        self._set_reading()

    def _set_reading(self) -> None:
        # Read again once the backlog is gone, the buffer drained and half the in-flight slots are free
        # (hysteresis: not a pause/resume per answered request).
        hold = bool(self.backlog) or not self.writable or len(self.in_flight) >= self.max_in_flight
        if hold and not self.paused and not self.closed:
            self.paused = True
            self.transport.pause_reading()
        elif self.paused and not hold and len(self.in_flight) <= self.max_in_flight // 2 and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def _answered(self, task: asyncio.Task) -> None:
        self.bytes_in_flight -= self.in_flight.pop(task)
        response = task.result()  # handle() never raises
        self.server.metrics.requests.labels(_OP_NAMES[_OP_BY_TYPE[type(response)]], str(response.status)).inc()
        if not self.closed:
            self.transport.write(p.encode(response))
        self._start_backlog()

    def _reject(self, exc: StorageError) -> None:
        rid = getattr(exc, "rid", -1)
        self.server.metrics.protocol_errors.labels(type(exc).__name__).inc()
        log.warning("closing connection from %s: %s", self.transport.get_extra_info("peername"), exc)
        self.transport.write(p.encode(p.ErrorResponse(rid, exc.code, str(exc))))
        self.transport.close()
        self.closed = True

    async def drain_and_close(self) -> None:
        if self.in_flight:
            await asyncio.wait(list(self.in_flight), timeout=5)
        if not self.closed:
            self.transport.close()
