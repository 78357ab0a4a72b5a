"""Bad input to a real bookie process: a clear error to the sender, nothing else harmed (invariant 6)."""

from __future__ import annotations

import asyncio
import struct

from storage import digest, protocol as p
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.errors import (
    FrameTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    MalformedRequestError,
    NoSuchLedgerError,
)
from storage.ledger_metadata import master_key


class RawConnection:
    """A bare protocol connection: bytes out, decoded responses in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = p.FrameDecoder("client")
        self.ready: list = []

    @classmethod
    async def open(cls, bookie) -> "RawConnection":
        return cls(*await asyncio.open_connection("127.0.0.1", bookie.port))

    async def request(self, message) -> object:
        self.writer.write(p.encode(message))
        return await self.response()

    async def response(self, timeout_s: float = 10.0):
        while not self.ready:
            data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
            if not data:
                raise ConnectionError("bookie closed the connection")
            self.ready += self.decoder.feed(data)
        return self.ready.pop(0)

    async def closed_by_peer(self, timeout_s: float = 10.0) -> bool:
        return await asyncio.wait_for(self.reader.read(1), timeout_s) == b""

    def close(self) -> None:
        self.writer.close()


async def add(conn: RawConnection, ledger_id: int, entry_id: int, key: bytes, flags: int = 0):
    body = digest.package(ledger_id, entry_id, -1, 1, b"x")
    return await conn.request(p.AddRequest(entry_id + 1, ledger_id, entry_id, flags, key, body))


async def test_garbage_and_oversized_frames_close_only_their_connection(start_bookies):
    cluster = start_bookies(3)
    bookie = cluster.bookies[0]
    healthy = await RawConnection.open(bookie)
    lac = await healthy.request(p.ReadLacRequest(1, 424242))
    assert lac.status == NoSuchLedgerError.code

    garbage = await RawConnection.open(bookie)
    garbage.writer.write(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
    error = await garbage.response()
    assert isinstance(error, p.ErrorResponse) and error.status == MalformedRequestError.code
    assert "msgpack" in error.message
    assert await garbage.closed_by_peer()

    huge = await RawConnection.open(bookie)
    huge.writer.write(struct.pack(">I", 512 * 1024 * 1024))
    error = await huge.response()
    assert isinstance(error, p.ErrorResponse) and error.status == FrameTooLargeError.code
    assert "exceeds" in error.message
    assert await huge.closed_by_peer()

    # The first connection never noticed.
    again = await healthy.request(p.ReadLacRequest(2, 424242))
    assert again.rid == 2 and again.status == NoSuchLedgerError.code
    healthy.close()


async def test_adds_to_unknown_closed_and_fenced_ledgers_get_their_codes(start_bookies):
    cluster = start_bookies(3)
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(add_entry_timeout_s=5))
    await client.registry.wait_for(lambda r: len(r.writable()) == 3, 15)
    conn = await RawConnection.open(cluster.bookies[0])
    key = master_key(b"")

    unknown = await add(conn, 987654321, 0, key)
    assert unknown.status == NoSuchLedgerError.code

    closed = await client.create_ledger(3, 3, 3)
    await closed.add_entry(b"one")
    await closed.close()
    # The bookie learns of the closure through a metadata watch: within a deadline, a stray
    # add is refused (one that slips in first lies past last_entry_id, where no reader looks).
    deadline = asyncio.get_running_loop().time() + 10
    entry_id = 1
    while (response := await add(conn, closed.ledger_id, entry_id, key)).status != LedgerClosedError.code:
        assert response.status == p.OK and asyncio.get_running_loop().time() < deadline, response
        entry_id += 1
    md, _ = await client.get_metadata(closed.ledger_id)
    assert md.last_entry_id == 0

    fenced = await client.create_ledger(3, 3, 3)
    await fenced.add_entry(b"one")
    fence = await conn.request(p.ReadRequest(77, fenced.ledger_id, p.LAST_ENTRY, p.FLAG_FENCE, key))
    assert fence.status == p.OK and digest.verify(fence.body, fenced.ledger_id, 0).payload == b"one"
    response = await add(conn, fenced.ledger_id, 1, key)
    assert response.status == LedgerFencedError.code
    recovery = await add(conn, fenced.ledger_id, 1, key, flags=p.FLAG_RECOVERY)
    assert recovery.status == p.OK

    conn.close()
    await client.close()
