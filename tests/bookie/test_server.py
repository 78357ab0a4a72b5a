"""The bookie protocol server in-process: a real core and server, raw protocol connections."""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest
from prometheus_client import CollectorRegistry

from storage import digest, protocol as p
from storage.bookie.bookie import Bookie
from storage.bookie.config import load_config
from storage.bookie.server import BookieServer
from storage.errors import (
    BookieReadOnlyError,
    DigestMismatchError,
    FrameTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    MalformedRequestError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key
from storage.metadata import open_store, paths
from tests.harness.processes import free_port

KEY = master_key(b"")


@pytest.fixture
async def served(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    config = load_config(overrides={"metadata_store_url": "memory://unused", "data_dir": str(tmp_path),
                                    "port": free_port(), "max_frame_bytes": 64 * 1024}, environ={})
    registry = CollectorRegistry()
    bookie = await Bookie.open(config, registry=registry)
    server = await BookieServer.start(bookie, store, config, registry)
    yield server, store
    await server.stop()
    await bookie.close()
    await store.close()


async def make_ledger(store, ledger_id: int, state: LedgerState = LedgerState.OPEN) -> None:
    md = LedgerMetadata(ledger_id, 3, 2, 2, b"", ((0, ("a", "b", "c")),), state=state)
    await store.create(paths.ledger_path(ledger_id), md.to_bytes(), make_parents=True)


class Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer, self.decoder, self.ready = reader, writer, p.FrameDecoder("client"), []

    @classmethod
    async def open(cls, server: BookieServer) -> "Conn":
        return cls(*await asyncio.open_connection("127.0.0.1", server.port))

    def send(self, *messages) -> None:
        self.writer.write(b"".join(p.encode(m) for m in messages))

    async def recv(self, n: int = 1) -> list:
        while len(self.ready) < n:
            data = await asyncio.wait_for(self.reader.read(1 << 16), 10)
            if not data:
                raise ConnectionError("closed by the bookie")
            self.ready += self.decoder.feed(data)
        out, self.ready = self.ready[:n], self.ready[n:]
        return out

    async def at_eof(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), 10) == b""


def add(rid: int, ledger_id: int, entry_id: int, payload: bytes = b"x", key: bytes = KEY, flags: int = 0):
    return p.AddRequest(rid, ledger_id, entry_id, flags, key, digest.package(ledger_id, entry_id, entry_id - 1,
                                                                            entry_id + 1, payload))


async def test_pipelined_adds_and_reads(served):
    server, store = served
    await make_ledger(store, 1)
    conn = await Conn.open(server)
    conn.send(*(add(i, 1, i, f"payload-{i}".encode()) for i in range(200)))
    responses = await conn.recv(200)
    assert sorted(r.rid for r in responses) == list(range(200))
    assert all(r.status == p.OK for r in responses)
    conn.send(*(p.ReadRequest(1000 + i, 1, i) for i in range(200)), p.ReadLacRequest(5000, 1),
              p.BatchReadRequest(6000, 1, 10, 19, 1 << 20))
    by_rid = {r.rid: r for r in await conn.recv(202)}
    assert all(digest.verify(by_rid[1000 + i].body, 1, i).payload == f"payload-{i}".encode() for i in range(200))
    assert by_rid[5000].lac == 198
    assert [digest.verify(b, 1, 10 + k).entry_id for k, b in enumerate(by_rid[6000].bodies)] == list(range(10, 20))


async def test_error_codes_for_each_bad_add(served):
    server, store = served
    await make_ledger(store, 2)
    await make_ledger(store, 3, LedgerState.CLOSED)
    conn = await Conn.open(server)
    conn.send(add(1, 2, 0))
    assert (await conn.recv())[0].status == p.OK

    cases = [
        (add(2, 999, 0), NoSuchLedgerError),
        (add(3, 3, 0), LedgerClosedError),
        (add(4, 2, 1, key=b"wrong key"), UnauthorizedError),
        (p.AddRequest(5, 2, 1, 0, KEY, b"\x00" * 40), DigestMismatchError),
        (p.ReadRequest(6, 2, 7), NoSuchEntryError),
        (p.ReadRequest(7, 12345, 0), NoSuchLedgerError),
    ]
    for request, error in cases:
        conn.send(request)
        (response,) = await conn.recv()
        assert response.status == error.code, (request, response)

    conn.send(p.ReadRequest(8, 2, p.LAST_ENTRY, p.FLAG_FENCE, KEY))
    assert (await conn.recv())[0].status == p.OK
    conn.send(add(9, 2, 1))
    assert (await conn.recv())[0].status == LedgerFencedError.code
    conn.send(add(10, 2, 1, flags=p.FLAG_RECOVERY))
    assert (await conn.recv())[0].status == p.OK


async def test_closing_a_ledger_in_metadata_reaches_the_bookie(served):
    server, store = served
    await make_ledger(store, 4)
    conn = await Conn.open(server)
    conn.send(add(1, 4, 0))
    assert (await conn.recv())[0].status == p.OK
    data, stat = await store.get(paths.ledger_path(4))
    closed = LedgerMetadata.from_bytes(data).with_state(LedgerState.CLOSED, last_entry_id=0)
    await store.set(paths.ledger_path(4), closed.to_bytes(), stat.version)
    deadline = asyncio.get_running_loop().time() + 10
    while server.gate.allows(4, recovery=False):  # the watch delivers the closure
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    conn.send(add(2, 4, 1))
    assert (await conn.recv())[0].status == LedgerClosedError.code


async def test_read_only_refuses_adds_but_serves_reads_and_recovery(served):
    server, store = served
    await make_ledger(store, 5)
    conn = await Conn.open(server)
    conn.send(add(1, 5, 0, b"before"))
    assert (await conn.recv())[0].status == p.OK
    server.set_read_only(True)
    conn.send(add(2, 5, 1), p.ReadRequest(3, 5, 0), add(4, 5, 1, flags=p.FLAG_RECOVERY))
    by_rid = {r.rid: r for r in await conn.recv(3)}
    assert by_rid[2].status == BookieReadOnlyError.code
    assert by_rid[3].status == p.OK and digest.verify(by_rid[3].body, 5, 0).payload == b"before"
    assert by_rid[4].status == p.OK


@pytest.mark.parametrize(
    "garbage, error",
    [
        (struct.pack(">I", 3) + b"\xc1\xc1\xc1", MalformedRequestError),
        (struct.pack(">I", 10 * 1024 * 1024), FrameTooLargeError),
        (p.encode(p.AddResponse(1, 0, 1, 1)), MalformedRequestError),  # a response is not a request
    ],
)
async def test_bad_frames_close_only_their_connection(served, garbage, error):
    server, store = served
    await make_ledger(store, 6)
    bystander = await Conn.open(server)
    offender = await Conn.open(server)
    offender.writer.write(garbage)
    (response,) = await offender.recv()
    assert isinstance(response, p.ErrorResponse) and response.status == error.code and response.message
    assert await offender.at_eof()
    bystander.send(add(1, 6, 0))
    assert (await bystander.recv())[0].status == p.OK
