"""Bad input to a real bookie process: a clear error to the sender, nothing else harmed (invariant 6)."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time
import urllib.request

from storage import digest, protocol as p
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.errors import (
    BadRequestError,
    FrameTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    MalformedRequestError,
    NoSuchLedgerError,
)
from storage.ledger_metadata import master_key
from storage.testing.waiting import wait_until


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


# ---- field bounds: every field a client controls, over a real bookie process ------------------------------------

KEY = master_key(b"")


def _entry(ledger_id: int, entry_id: int, lac: int = -1) -> bytes:
    return digest.package(ledger_id, entry_id, lac, 1, b"x")


BAD_REQUESTS = [
    ("ADD a negative ledger id", p.AddRequest(1, -1, 0, 0, KEY, _entry(-1, 0)), "ledger_id"),
    ("ADD a ledger id beyond a long", p.AddRequest(2, 2**64 - 1, 0, 0, KEY, b"x" * 40), "ledger_id"),
    ("ADD a negative entry id", p.AddRequest(3, 5, -2, 0, KEY, _entry(5, -2)), "entry_id"),
    ("ADD an unknown flag", p.AddRequest(4, 5, 0, 4, KEY, _entry(5, 0)), "flags"),
    ("ADD negative flags", p.AddRequest(5, 5, 0, -1, KEY, _entry(5, 0)), "flags"),
    ("ADD a 1 MiB master key", p.AddRequest(7, 5, 0, 0, b"k" * 2**20, _entry(5, 0)), "master_key"),
    ("READ an entry below LAST_ENTRY", p.ReadRequest(8, 5, -2, 0, b""), "entry_id"),
    ("READ an unknown flag", p.ReadRequest(9, 5, 0, 2, KEY), "flags"),
    ("READ a 100 KiB key", p.ReadRequest(11, 5, 0, 0, b"k" * 102400), "master_key"),
    ("READ_LAC a negative ledger id", p.ReadLacRequest(12, -3), "ledger_id"),
    ("BATCH_READ a negative first entry", p.BatchReadRequest(13, 5, -1, 3, 1000), "first_entry_id"),
    ("BATCH_READ a reversed range", p.BatchReadRequest(14, 5, 9, 3, 1000), "last_entry_id"),
    ("BATCH_READ no bytes", p.BatchReadRequest(15, 5, 0, 3, 0), "max_bytes"),
    ("BATCH_READ negative bytes", p.BatchReadRequest(16, 5, 0, 3, -(2**63)), "max_bytes"),
    ("a negative request id", p.ReadLacRequest(-7, 5), "request id"),
]


ANSWERED_WITH = {p.AddRequest: p.AddResponse, p.ReadRequest: p.ReadResponse, p.ReadLacRequest: p.ReadLacResponse,
                 p.BatchReadRequest: p.BatchReadResponse}


async def test_every_request_field_out_of_bounds_is_a_bad_request_and_the_connection_stays(start_bookies):
    cluster = start_bookies(3)
    conn = await RawConnection.open(cluster.bookies[0])
    for name, request, field in BAD_REQUESTS:
        response = await conn.request(request)
        assert type(response) is ANSWERED_WITH[type(request)], name
        assert (response.rid, response.status) == (request.rid, BadRequestError.code), name
    # The same connection still serves (BadRequest answers the request, it does not close anything).
    lac = await conn.request(p.ReadLacRequest(99, 424242))
    assert (lac.rid, lac.status) == (99, NoSuchLedgerError.code)
    conn.close()
    assert "internal error" not in cluster.bookies[0].log_tail(400)


async def test_an_add_whose_lac_is_not_before_its_entry_is_a_bad_request(start_bookies):
    cluster = start_bookies(3)
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(add_entry_timeout_s=5))
    await client.registry.wait_for(lambda r: len(r.writable()) == 3, 15)
    ledger = await client.create_ledger(3, 3, 3)
    conn = await RawConnection.open(cluster.bookies[0])
    for rid, lac in enumerate((0, 7, 2**62, -2), start=1):
        response = await conn.request(p.AddRequest(rid, ledger.ledger_id, 0, 0, KEY, _entry(ledger.ledger_id, 0, lac)))
        assert response.status == BadRequestError.code, lac
    good = await conn.request(p.AddRequest(9, ledger.ledger_id, 0, 0, KEY, _entry(ledger.ledger_id, 0, -1)))
    assert good.status == p.OK
    lac = await conn.request(p.ReadLacRequest(10, ledger.ledger_id))
    assert (lac.status, lac.lac) == (p.OK, -1)  # no refused add left its claim behind
    conn.close()
    await client.close()


CAPS = {"MAGNETAR_BOOKIE_MAX_BATCH_READ_SIZE_BYTES": "250000", "MAGNETAR_BOOKIE_MAX_BATCH_READ_ENTRIES": "5"}


async def _ledger_of(cluster, sizes: list[int]):
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(add_entry_timeout_s=10))
    await client.registry.wait_for(lambda r: len(r.writable()) == len(cluster.bookies), 15)
    ledger = await client.create_ledger(3, 3, 3)
    for i, size in enumerate(sizes):
        await ledger.add_entry(bytes([i % 256]) * size)
    return client, ledger


async def test_a_batch_read_asking_for_everything_gets_the_capped_batch(start_bookies):
    cluster = start_bookies(3, env=CAPS)
    client, ledger = await _ledger_of(cluster, [1000] * 10 + [100_000] * 10)
    lid = ledger.ledger_id
    conn = await RawConnection.open(cluster.bookies[0])
    small = await conn.request(p.BatchReadRequest(1, lid, 0, 2**63 - 1, 2**63 - 1))
    assert small.status == p.OK and len(small.bodies) == 5  # max_batch_read_entries
    assert [digest.verify(b, lid, i).entry_id for i, b in enumerate(small.bodies)] == [0, 1, 2, 3, 4]
    large = await conn.request(p.BatchReadRequest(2, lid, 10, 19, 2**40))
    assert large.status == p.OK and len(large.bodies) == 2  # 3 x 100 KB would pass max_batch_read_size_bytes
    assert sum(map(len, large.bodies)) <= 250_000
    conn.close()
    await ledger.close()
    await client.close()


def _metric(bookie, name: str, labels: str = "") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{bookie.http_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{re.escape(name + labels)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


BATCH_READS_OK = ("bookie_server_requests_total", '{op="batch_read",status="0"}')


async def test_a_client_that_never_reads_its_responses_does_not_grow_the_bookie(start_bookies):
    budget = 2_000_000
    cluster = start_bookies(3, env={**CAPS, "MAGNETAR_BOOKIE_MAX_BYTES_IN_FLIGHT_PER_CONNECTION": str(budget)})
    bookie = cluster.bookies[0]
    client, ledger = await _ledger_of(cluster, [100_000] * 4)
    lid = ledger.ledger_id
    count = 400  # each answer is two 100 KB entries: ~80 MB if the bookie wrote them all into its buffer
    attacker = socket.create_connection(("127.0.0.1", bookie.port))
    attacker.sendall(b"".join(p.encode(p.BatchReadRequest(rid, lid, 0, 3, 250_000)) for rid in range(1, count + 1)))

    def backpressure_engaged():
        return _metric(bookie, "bookie_server_write_buffer_max_bytes") > 0

    await asyncio.to_thread(wait_until, backpressure_engaged, 15, "the bookie to buffer responses for the attacker")
    # Watched for a while (the claim is that it stays so): the buffer and the answers given stay bounded.
    bound = budget + 250_000 + 64 * 1024
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        buffered = _metric(bookie, "bookie_server_write_buffer_max_bytes")
        answered = _metric(bookie, *BATCH_READS_OK)
        assert buffered <= bound, f"{buffered:.0f} bytes buffered for a client that reads nothing"
        assert answered < count // 2, f"{answered:.0f} of {count} batch reads served to a client that reads nothing"
        await asyncio.sleep(0.1)
    # Another client is served meanwhile.
    healthy = await RawConnection.open(bookie)
    lac = await healthy.request(p.ReadLacRequest(1, lid))
    assert lac.status == p.OK
    healthy.close()
    # Once the attacker reads, every request is answered: held back, never dropped.
    decoder = p.FrameDecoder("client")
    answers: list = []
    attacker.settimeout(30)
    while len(answers) < count:
        data = attacker.recv(1 << 20)
        assert data, f"the bookie closed the connection after {len(answers)} answers"
        answers += decoder.feed(data)
    assert sorted(a.rid for a in answers) == list(range(1, count + 1))
    assert all(a.status == p.OK and len(a.bodies) == 2 for a in answers)
    attacker.close()
    await ledger.close()
    await client.close()
