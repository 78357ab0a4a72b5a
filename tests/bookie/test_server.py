"""The bookie protocol server in-process: a real core and server, memory:// metadata, raw protocol connections."""

from __future__ import annotations

import struct
import uuid

import pytest
from prometheus_client import CollectorRegistry

from storage import digest, protocol as p
from storage.bookie.bookie import Bookie
from storage.bookie.server import BookieServer, LedgerGate
from storage.errors import (
    BookieInternalError,
    BookieReadOnlyError,
    BookieShuttingDownError,
    DigestMismatchError,
    FrameTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    MalformedRequestError,
    MetadataConnectionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerState
from storage.metadata import open_store, paths
from storage.testing.waiting import wait_until_async
from tests.bookie.support import KEY, Conn, add, close_ledger, config_for, make_ledger

MAX_FRAME = 64 * 1024


def frame(body: bytes) -> bytes:
    """A length-prefixed frame around hand-made msgpack bytes."""
    return struct.pack(">I", len(body)) + body


class ScriptedStore:
    """The real store, plus ``fail_next_get(exc)``: a scripted metadata fault for the ledger gate."""

    def __init__(self, store):
        self._store = store
        self._failures: list[Exception] = []

    def fail_next_get(self, exc: Exception) -> None:
        self._failures.append(exc)

    async def get(self, path):
        if self._failures:
            raise self._failures.pop(0)
        return await self._store.get(path)

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.fixture
async def served(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    config = config_for(tmp_path, max_frame_bytes=MAX_FRAME)
    registry = CollectorRegistry()
    bookie = await Bookie.open(config, registry=registry)
    scripted = ScriptedStore(store)
    server = await BookieServer.start(bookie, scripted, config, registry)
    server.scripted_store = scripted
    yield server, store
    await server.stop()
    await bookie.close()
    await store.close()


async def test_pipelined_adds_and_reads(served):
    server, store = served
    await make_ledger(store, 1)
    conn = await Conn.open(server.port)
    conn.send(*(add(i, 1, i, f"payload-{i}".encode()) for i in range(200)))  # one write: 200 requests in flight
    responses = await conn.recv(200)
    assert sorted(r.rid for r in responses) == list(range(200))
    assert all(type(r) is p.AddResponse and r.status == p.OK for r in responses)
    conn.send(*(p.ReadRequest(1000 + i, 1, i) for i in range(200)), p.ReadLacRequest(5000, 1),
              p.BatchReadRequest(6000, 1, 10, 19, 1 << 20), p.ReadRequest(7000, 1, p.LAST_ENTRY))
    by_rid = {r.rid: r for r in await conn.recv(203)}
    assert all(digest.verify(by_rid[1000 + i].body, 1, i).payload == f"payload-{i}".encode() for i in range(200))
    assert by_rid[5000].lac == 198  # entry 199 carries LAC 198
    assert [digest.verify(b, 1, 10 + k).entry_id for k, b in enumerate(by_rid[6000].bodies)] == list(range(10, 20))
    assert digest.verify(by_rid[7000].body, 1, 199).payload == b"payload-199"
    await conn.close()


async def test_responses_leave_in_completion_order(served):
    """An add waits for the journal fsync; a READ_LAC sent after it on the same connection is answered first."""
    server, store = served
    await make_ledger(store, 11)
    conn = await Conn.open(server.port)
    assert (await conn.request(add(1, 11, 0))).status == p.OK  # the gate now knows ledger 11
    conn.send(add(2, 11, 1), p.ReadLacRequest(3, 11))
    first, second = await conn.recv(2)
    assert (type(first), first.rid) == (p.ReadLacResponse, 3)
    assert (type(second), second.rid, second.status) == (p.AddResponse, 2, p.OK)
    await conn.close()


async def test_error_codes_for_each_bad_request(served):
    server, store = served
    await make_ledger(store, 2)
    await make_ledger(store, 3, LedgerState.CLOSED)
    conn = await Conn.open(server.port)
    assert (await conn.request(add(1, 2, 0))).status == p.OK

    cases = [
        (add(2, 999, 0), NoSuchLedgerError),  # no metadata at all
        (add(3, 3, 0), LedgerClosedError),  # metadata says CLOSED
        (add(4, 2, 1, key=b"wrong key"), UnauthorizedError),
        (p.AddRequest(5, 2, 1, 0, KEY, b"\x00" * 40), DigestMismatchError),  # corrupt body
        (p.AddRequest(6, 2, 1, 0, KEY, digest.package(2, 5, 0, 1, b"x")), DigestMismatchError),  # ids disagree
        (p.ReadRequest(7, 2, 7), NoSuchEntryError),
        (p.ReadRequest(8, 12345, 0), NoSuchLedgerError),
        (p.ReadLacRequest(9, 12345), NoSuchLedgerError),
        (p.BatchReadRequest(10, 12345, 0, 5, 1 << 20), NoSuchLedgerError),
        (p.ReadRequest(11, 2, 0, p.FLAG_FENCE, b"wrong key"), UnauthorizedError),
    ]
    for request, error in cases:
        response = await conn.request(request)
        assert response.rid == request.rid and response.status == error.code, (request, response)

    fence = await conn.request(p.ReadRequest(20, 2, p.LAST_ENTRY, p.FLAG_FENCE, KEY))
    assert fence.status == p.OK and digest.verify(fence.body, 2, 0).payload == b"x"
    assert (await conn.request(add(21, 2, 1))).status == LedgerFencedError.code
    assert (await conn.request(add(22, 2, 1, flags=p.FLAG_RECOVERY))).status == p.OK  # recovery adds pass a fence
    assert (await conn.request(add(23, 3, 0, flags=p.FLAG_RECOVERY))).status == p.OK  # and a closed ledger
    await conn.close()


async def test_closure_and_deletion_in_metadata_reach_the_bookie(served):
    server, store = served
    await make_ledger(store, 4)
    conn = await Conn.open(server.port)
    assert (await conn.request(add(1, 4, 0))).status == p.OK
    assert server.gate.watched == 1
    await close_ledger(store, 4, last_entry_id=0)
    await wait_until_async(lambda: server.gate.state(4) is LedgerState.CLOSED, 10, "the watch to deliver the closure")
    assert server.gate.watched == 0  # CLOSED is terminal: no watch kept
    assert (await conn.request(add(2, 4, 1))).status == LedgerClosedError.code

    await make_ledger(store, 5)
    assert (await conn.request(add(3, 5, 0))).status == p.OK
    await store.delete(paths.ledger_path(5))
    await wait_until_async(lambda: server.gate.state(5) is None, 10, "the watch to deliver the deletion")
    assert (await conn.request(add(4, 5, 1))).status == NoSuchLedgerError.code
    await conn.close()


async def test_unreachable_metadata_is_a_retriable_internal_error_and_not_cached(served):
    server, store = served
    await make_ledger(store, 6)
    conn = await Conn.open(server.port)
    server.scripted_store.fail_next_get(MetadataConnectionError("zookeeper unreachable"))
    response = await conn.request(add(1, 6, 0))
    assert response.status == BookieInternalError.code and BookieInternalError.retriable
    assert (await conn.request(add(2, 6, 0))).status == p.OK  # the next add reads the metadata again
    await conn.close()


async def test_closed_ledger_cache_is_bounded(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    gate = LedgerGate(store, closed_cache_size=2)
    for lid in (1, 2, 3):
        await make_ledger(store, lid, LedgerState.CLOSED)
        with pytest.raises(LedgerClosedError):
            await gate.check(lid, recovery=False)
    assert [gate.state(lid) for lid in (1, 2, 3)] == [None, LedgerState.CLOSED, LedgerState.CLOSED]
    assert gate.watched == 0
    with pytest.raises(LedgerClosedError):  # evicted: read again, same answer
        await gate.check(1, recovery=False)
    await gate.check(1, recovery=True)
    gate.close()
    await store.close()


async def test_read_only_refuses_adds_but_serves_reads_and_recovery(served):
    server, store = served
    await make_ledger(store, 7)
    conn = await Conn.open(server.port)
    assert (await conn.request(add(1, 7, 0, b"before"))).status == p.OK
    server.set_read_only(True, "set by a test")
    conn.send(add(2, 7, 1), p.ReadRequest(3, 7, 0), p.ReadLacRequest(4, 7), add(5, 7, 1, flags=p.FLAG_RECOVERY))
    by_rid = {r.rid: r for r in await conn.recv(4)}
    assert by_rid[2].status == BookieReadOnlyError.code
    assert by_rid[3].status == p.OK and digest.verify(by_rid[3].body, 7, 0).payload == b"before"
    assert by_rid[4].status == p.OK
    assert by_rid[5].status == p.OK
    server.set_read_only(False, "")
    assert (await conn.request(add(6, 7, 2))).status == p.OK
    await conn.close()


@pytest.mark.parametrize(
    "garbage, error, words",
    [
        (struct.pack(">I", 3) + b"\xc1\xc1\xc1", MalformedRequestError, "not valid msgpack"),
        (struct.pack(">I", 10 * 1024 * 1024), FrameTooLargeError, "exceeds"),
        # a real ADD whose body makes the frame larger than max_frame_bytes
        (p.encode(add(1, 8, 0, b"y" * (MAX_FRAME + 1))), FrameTooLargeError, f"{MAX_FRAME}-byte limit"),
        (p.encode(p.AddResponse(1, 0, 1, 1)), MalformedRequestError, "ADD frame must have 7 fields"),
        (frame(b"\x93\x03\x01\xa1x"), MalformedRequestError, "READ_LAC: expected integers"),  # [3, 1, "x"]
    ],
)
async def test_bad_frames_close_only_their_connection(served, garbage, error, words):
    server, store = served
    await make_ledger(store, 8)
    bystander = await Conn.open(server.port)
    assert (await bystander.request(add(1, 8, 0))).status == p.OK
    offender = await Conn.open(server.port)
    offender.writer.write(garbage)
    (response,) = await offender.recv()
    assert isinstance(response, p.ErrorResponse) and response.status == error.code
    assert words in response.message, response.message
    assert await offender.at_eof()
    assert (await bystander.request(add(2, 8, 1))).status == p.OK
    await bystander.close()


async def test_error_frame_carries_the_request_id_when_readable(served):
    server, _ = served
    conn = await Conn.open(server.port)
    conn.writer.write(frame(b"\x93\x03\xcd\x10\x92\xa3bad"))  # [READ_LAC, 4242, "bad"]: ledger id not an int
    (response,) = await conn.recv()
    assert isinstance(response, p.ErrorResponse) and response.rid == 4242
    assert await conn.at_eof()


async def test_stop_answers_in_flight_requests_then_closes(served):
    server, store = served
    await make_ledger(store, 9)
    conn = await Conn.open(server.port)
    assert (await conn.request(add(1, 9, 0))).status == p.OK
    conn.send(*(add(10 + i, 9, 1 + i) for i in range(50)))
    answered = await conn.recv(1)  # the server has read (at least) the first request
    await server.stop()
    while True:
        try:
            answered += await conn.recv()
        except ConnectionError:
            break
    # What the server read before stopping is answered, not dropped; what it
    # read after is refused as "shutting down" (retriable), never half-done.
    assert all(r.status in (p.OK, BookieShuttingDownError.code) for r in answered), answered
    assert len({r.rid for r in answered}) == len(answered)
