"""BookieConnection / BookiePool against a scripted server speaking storage.protocol over real TCP."""

import asyncio

import pytest

from storage import protocol
from storage.client.config import ClientConfig, with_changes
from storage.client.connection import BookiePool
from storage.client.faults import FaultPlan
from storage.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    LedgerFencedError,
    MalformedRequestError,
    NoSuchEntryError,
)
from storage.testing.waiting import wait_until_async


class ScriptedServer:
    """Answers each request with ``script(request)``: a Response, None (never answer), or 'close'."""

    def __init__(self, script):
        self.script = script
        self.requests: list = []
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader, writer):
        self.connections += 1
        self.writers.append(writer)
        decoder = protocol.FrameDecoder("server")
        while data := await reader.read(65536):
            for req in decoder.feed(data):
                self.requests.append(req)
                resp = self.script(req)
                if resp == "close":
                    writer.close()
                    return
                if resp is not None:
                    writer.write(protocol.encode(resp))
        writer.close()

    def drop_connections(self):
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()

    async def stop(self):
        self.drop_connections()
        self.server.close()
        await self.server.wait_closed()


def ok_read(req):
    if isinstance(req, protocol.ReadRequest):
        return protocol.ReadResponse(req.rid, 0, req.ledger_id, req.entry_id, b"body-%d" % req.entry_id)
    if isinstance(req, protocol.AddRequest):
        return protocol.AddResponse(req.rid, 0, req.ledger_id, req.entry_id)
    if isinstance(req, protocol.ReadLacRequest):
        return protocol.ReadLacResponse(req.rid, 0, req.ledger_id, 41)
    raise AssertionError(req)


@pytest.fixture
async def server_factory():
    servers = []

    async def make(script):
        s = await ScriptedServer(script).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        await s.stop()


def pool_for(server, config=None, faults=None):
    return BookiePool(config or ClientConfig(), lambda bookie_id: ("127.0.0.1", server.port), faults)


async def test_pipelined_requests_resolve_by_request_id(server_factory):
    held = []

    def script(req):
        # Answer even entries at once; odd ones only after entry 9 arrives, in reverse order.
        if req.entry_id % 2:
            held.append(req)
            return None
        return ok_read(req)

    server = await server_factory(script)
    pool = pool_for(server)
    futures = [pool.read("b", 1, e) for e in range(10)]
    done = await asyncio.gather(*futures[0::2])
    assert [r.body for r in done] == [b"body-%d" % e for e in range(0, 10, 2)]
    writer = server.writers[0]
    for req in reversed(held):
        writer.write(protocol.encode(ok_read(req)))
    odd = await asyncio.gather(*futures[1::2])
    assert [r.entry_id for r in odd] == [1, 3, 5, 7, 9]
    assert server.connections == 1
    await pool.close()


async def test_status_maps_to_error_class(server_factory):
    def script(req):
        if req.entry_id == 1:
            return protocol.AddResponse(req.rid, LedgerFencedError.code, req.ledger_id, req.entry_id)
        return protocol.ReadResponse(req.rid, NoSuchEntryError.code, req.ledger_id, req.entry_id, None)

    server = await server_factory(script)
    pool = pool_for(server)
    with pytest.raises(LedgerFencedError, match="bookie b"):
        await pool.add("b", 7, 1, b"k", b"x")
    with pytest.raises(NoSuchEntryError):
        await pool.read("b", 7, 2)
    await pool.close()


async def test_timeout_fails_only_the_silent_request(server_factory):
    server = await server_factory(lambda req: None if req.entry_id == 0 else ok_read(req))
    pool = pool_for(server, with_changes(ClientConfig(), read_timeout_s=0.2))
    slow = pool.read("b", 1, 0)
    fast = await pool.read("b", 1, 1)
    assert fast.body == b"body-1"
    with pytest.raises(BookieTimeoutError, match="did not answer within 0.2s"):
        await slow
    assert (await pool.read("b", 1, 2)).body == b"body-2", "the connection survives a timeout"
    await pool.close()


async def test_connection_loss_fails_pending_and_pool_reconnects(server_factory):
    server = await server_factory(lambda req: None)
    pool = pool_for(server)
    pending = [pool.read("b", 1, e) for e in range(3)]
    await wait_until_async(lambda: len(server.requests) == 3, 5, "the server to get three requests")
    server.drop_connections()
    for fut in pending:
        with pytest.raises(BookieUnavailableError, match="lost"):
            await fut
    server.script = ok_read
    assert (await pool.read("b", 1, 5)).body == b"body-5"
    assert server.connections == 2
    await pool.close()


async def test_connect_refused_is_unavailable():
    pool = BookiePool(ClientConfig(), lambda b: ("127.0.0.1", _closed_port()))
    with pytest.raises(BookieUnavailableError, match="cannot connect"):
        await pool.add("dead", 1, 0, b"k", b"x")
    await pool.close()


async def test_error_response_fails_its_request_or_all(server_factory):
    def script(req):
        if req.entry_id == 1:
            return protocol.ErrorResponse(req.rid, MalformedRequestError.code, "bad frame")
        if req.entry_id == 2:
            return protocol.ErrorResponse(-1, MalformedRequestError.code, "unparseable")
        return None

    server = await server_factory(script)
    pool = pool_for(server)
    silent = pool.read("b", 1, 0)
    with pytest.raises(MalformedRequestError, match="bad frame"):
        await pool.read("b", 1, 1)
    with pytest.raises(BookieUnavailableError, match="protocol error: unparseable"):
        await pool.read("b", 1, 2)
    with pytest.raises(BookieUnavailableError):
        await silent
    await pool.close()


async def test_fault_plan_fail_nth_hold_and_corrupt(server_factory):
    server = await server_factory(ok_read)
    plan = FaultPlan()
    pool = pool_for(server, faults=plan)
    plan.fail_nth("b", 2, BookieTimeoutError("scripted"), ops={"add"})
    assert (await pool.add("b", 1, 0, b"k", b"x")).entry_id == 0
    with pytest.raises(BookieTimeoutError, match="scripted"):
        await pool.add("b", 1, 1, b"k", b"x")
    assert (await pool.add("b", 1, 2, b"k", b"x")).entry_id == 2

    hold = plan.hold_next("b", ops={"read"})
    fut = pool.read("b", 1, 3)
    assert (await hold.reached)[1] == "read"
    assert not fut.done() and not any(getattr(r, "entry_id", None) == 3 for r in server.requests)
    hold.release()
    assert (await fut).body == b"body-3"

    hold = plan.hold_next("b")
    fut = pool.read("b", 1, 4)
    await hold.reached
    hold.fail(DigestMismatchError("scripted after hold"))
    with pytest.raises(DigestMismatchError):
        await fut

    plan.corrupt_reads("b", times=1)
    assert (await pool.read("b", 1, 5)).body != b"body-5"
    assert (await pool.read("b", 1, 6)).body == b"body-6"
    await pool.close()


async def test_burst_of_requests_is_written_in_few_writes(server_factory):
    server = await server_factory(ok_read)
    pool = pool_for(server)
    conn = pool.connection("b")
    writes = []
    await wait_until_async(lambda: conn._transport is not None, 5, "the connection to be made")
    real_write = conn._transport.write
    conn._transport.write = lambda data: (writes.append(len(data)), real_write(data))
    results = await asyncio.gather(*(pool.add("b", 1, e, b"k", b"x" * 10) for e in range(200)))
    assert [r.entry_id for r in results] == list(range(200))
    assert len(writes) == 1, "one loop iteration's frames go out in one write"
    await pool.close()


def _closed_port():
    from storage.testing.processes import free_port

    return free_port()  # nothing listens there


async def test_large_adds_go_over_a_second_connection_so_small_ones_never_queue_behind_them(server_factory):
    from storage.client.connection import BULK_ADD_BYTES

    server = await server_factory(ok_read)
    pool = pool_for(server)
    big = pool.add("b", 1, 0, b"k", b"x" * BULK_ADD_BYTES)
    small = pool.add("b", 2, 0, b"k", b"y" * 100)
    read = pool.read("b", 2, 0)
    main, bulk = pool.connection("b"), pool.connection("b", bulk=True)
    assert main is not bulk
    assert len(bulk._pending) == 1 and len(main._pending) == 2  # the large add alone on its own stream
    assert [(r.ledger_id, r.entry_id) for r in await asyncio.gather(big, small)] == [(1, 0), (2, 0)]
    assert (await read).body == b"body-0"
    pool.drop("b")
    assert main.closed and bulk.closed
    await pool.close()


async def test_a_large_add_goes_out_a_slice_per_loop_turn_and_arrives_whole_and_in_order(server_factory):
    from storage.client.connection import _WRITE_SLICE_BYTES

    server = await server_factory(ok_read)
    pool = pool_for(server)
    conn = pool.connection("b", bulk=True)
    await wait_until_async(lambda: conn._transport is not None, 5, "the connection to be made")
    turns: list[list[int]] = [[]]  # bytes handed to the transport, per loop turn
    real_write = conn._transport.write
    conn._transport.write = lambda data: (turns[-1].append(len(data)), real_write(data))
    ticking = True

    async def ticker():  # marks each turn of the loop
        while ticking:
            await asyncio.sleep(0)
            turns.append([])

    tick = asyncio.ensure_future(ticker())
    bodies = [bytes([65 + e]) * (1_000_000 + e) for e in range(3)]
    results = await asyncio.gather(*(pool.add("b", 1, e, b"k", body) for e, body in enumerate(bodies)))
    ticking = False
    await tick
    assert [r.entry_id for r in results] == [0, 1, 2]
    assert [r.body for r in server.requests] == bodies  # whole, in order, nothing interleaved
    per_turn = [sum(t) for t in turns if t]
    assert max(per_turn) <= _WRITE_SLICE_BYTES
    assert sum(per_turn) > sum(map(len, bodies)) and len(per_turn) >= sum(map(len, bodies)) // _WRITE_SLICE_BYTES
    await pool.close()


async def test_large_adds_are_paced_while_small_adds_flow_and_go_at_full_speed_alone(server_factory):
    from storage.client.connection import _WRITE_SLICE_BYTES

    rate = 20 * 1024 * 1024  # 256 KiB slices 12.5 ms apart when paced
    server = await server_factory(ok_read)
    pool = pool_for(server, ClientConfig(bulk_add_pace_bytes_per_s=rate))
    body = b"z" * (2 * 1024 * 1024)
    slices_after_the_first = (len(body) + 200) // _WRITE_SLICE_BYTES  # the frame's header makes it a bit longer

    await pool.add("b", 1, 0, b"k", body)  # alone: never paced
    assert pool.pacer.paced_s == 0

    await pool.add("b", 2, 0, b"k", b"s" * 100)  # a small add: large ones are paced for the next second
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await pool.add("b", 1, 1, b"k", body)).entry_id == 1
    took = loop.time() - started
    expected = slices_after_the_first * _WRITE_SLICE_BYTES / rate
    assert pool.pacer.paced_s == pytest.approx(expected, rel=0.01)
    assert took >= expected * 0.95  # the waits are timers: the add cannot finish sooner
    assert [r.body for r in server.requests if isinstance(r, protocol.AddRequest) and r.ledger_id == 1] == [body, body]
    await pool.close()


def test_the_pacer_binds_only_while_small_adds_were_sent_within_its_window():
    from storage.client.pacing import SMALL_ADDS_ACTIVE_S, BulkPacer

    now = [100.0]
    pacer = BulkPacer(1024 * 1024, clock=lambda: now[0])
    assert pacer.gap_s(256 * 1024) == 0  # nobody small yet
    pacer.small_add()
    now[0] += SMALL_ADDS_ACTIVE_S / 2
    assert pacer.gap_s(256 * 1024) == pytest.approx(0.25)
    assert pacer.gap_s(0) == 0
    now[0] += SMALL_ADDS_ACTIVE_S
    assert pacer.gap_s(256 * 1024) == 0  # the small adds stopped a window ago
    assert pacer.paced_s == pytest.approx(0.25)
    off = BulkPacer(0, clock=lambda: now[0])
    off.small_add()
    assert off.gap_s(256 * 1024) == 0


def test_the_pacer_never_builds_a_queue_of_more_than_a_second_at_its_pace():
    from storage.client.pacing import MAX_PACED_BACKLOG_S, BulkPacer

    pacer = BulkPacer(1024 * 1024, clock=lambda: 5.0)
    pacer.small_add()
    limit = int(1024 * 1024 * MAX_PACED_BACKLOG_S)
    assert pacer.gap_s(256 * 1024, backlog_bytes=limit) == pytest.approx(0.25)
    assert pacer.gap_s(256 * 1024, backlog_bytes=limit + 1) == 0  # more waits than a second's worth: full speed


async def test_adds_queued_beyond_a_second_at_the_pace_go_at_full_speed_until_the_queue_is_back_under_it(
        server_factory):
    from storage.client.connection import _WRITE_SLICE_BYTES

    rate = 2 * 1024 * 1024  # paced, six 1 MiB adds would take about 3 s; the queue over 2 MiB goes unpaced
    server = await server_factory(ok_read)
    pool = pool_for(server, ClientConfig(bulk_add_pace_bytes_per_s=rate))
    body = b"q" * (1024 * 1024)
    large = asyncio.gather(*(pool.add("b", 1, e, b"k", body) for e in range(6)))
    entry = 0
    while not large.done():  # small adds keep flowing all along, so the pace stays on
        await pool.add("b", 2, entry, b"k", b"s" * 100)
        entry += 1
        await asyncio.wait([large], timeout=0.05)
    assert [r.entry_id for r in large.result()] == list(range(6))
    # Paced only while at most 2 MiB waited: about the last 2 MiB, never the 4 MiB before them.
    assert 0 < pool.pacer.paced_s <= (2 * 1024 * 1024 + _WRITE_SLICE_BYTES) / rate
    await pool.close()


def test_the_pace_must_not_be_negative():
    with pytest.raises(ValueError, match="bulk_add_pace_bytes_per_s"):
        ClientConfig(bulk_add_pace_bytes_per_s=-1).validate()


def test_a_small_add_in_another_process_sharing_the_beacon_paces_this_ones_large_adds(tmp_path):
    import subprocess
    import sys

    from storage.client.pacing import SMALL_ADDS_ACTIVE_S, BulkPacer, SmallAddBeacon

    path = str(tmp_path / "small-adds.beacon")
    here = BulkPacer(1024 * 1024, beacon=SmallAddBeacon(path))
    assert here.gap_s(256 * 1024) == 0  # nobody has sent a small add
    # Another process (a second broker worker) sends a small add: CLOCK_MONOTONIC is one clock for the machine.
    subprocess.run([sys.executable, "-c",
                    "import sys; from storage.client.pacing import BulkPacer, SmallAddBeacon; "
                    "BulkPacer(1, beacon=SmallAddBeacon(sys.argv[1])).small_add()", path], check=True)
    assert here.gap_s(256 * 1024) == pytest.approx(0.25)
    stale = BulkPacer(1024 * 1024, clock=lambda: SmallAddBeacon(path).last() + SMALL_ADDS_ACTIVE_S + 0.1,
                      beacon=SmallAddBeacon(path))
    assert stale.gap_s(256 * 1024) == 0  # a window after it, not paced
    SmallAddBeacon(path).mark(here._clock() + 3600.0)  # left by an earlier boot, whose monotonic clock ran further
    assert here.gap_s(256 * 1024) == 0
