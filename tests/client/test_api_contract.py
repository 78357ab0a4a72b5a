"""One contract for every storage.client.api implementation: the real client on in-process bookies, and memory.

Each test runs twice (``bookies``, ``memory``) with the same assertions, so the
in-memory ledgers the managed-ledger tests use cannot drift from what the
real client does.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from storage.client import ClientConfig
from storage.client import api
from storage.client.memory import MemoryLedgerClient, MemoryLedgerStore
from storage.errors import (
    ClientClosedError, FrameTooLargeError, InvalidQuorumError, LedgerClosedError, LedgerFencedError,
    NoSuchEntryError, NoSuchLedgerError, UnauthorizedError,
)
from tests.client.conftest import Cluster

PW = b"pw"


class Clients:
    """Makes clients that share one ledger store (one cluster of bookies, or one MemoryLedgerStore)."""

    def __init__(self, kind: str, cluster=None):
        self.kind = kind
        self._cluster = cluster
        self._memory = MemoryLedgerStore()
        self._memory_clients: list[MemoryLedgerClient] = []

    async def new(self, config: ClientConfig | None = None) -> api.LedgerClient:
        if self.kind == "bookies":
            return await self._cluster.client(config)
        client = MemoryLedgerClient(self._memory, config)
        self._memory_clients.append(client)
        return client

    async def close(self) -> None:
        for client in self._memory_clients:
            await client.close()


@pytest.fixture(params=["bookies", "memory"])
async def clients(request, tmp_path):
    cluster = None
    if request.param == "bookies":
        cluster = Cluster(tmp_path, f"memory://contract-{uuid.uuid4().hex[:12]}")
        await cluster.open()
        await cluster.start_bookies(3)
    made = Clients(request.param, cluster)
    try:
        yield made
    finally:
        await made.close()
        if cluster is not None:
            await cluster.close()


async def _lac_reaches(handle: api.ReadHandle, entry_id: int, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (lac := await handle.read_lac()) < entry_id:
        if time.monotonic() > deadline:
            raise TimeoutError(f"LAC {lac} did not reach {entry_id} within {timeout_s}s")
        await asyncio.sleep(0.01)
    return lac


async def test_the_implementation_satisfies_the_protocols(clients):
    client = await clients.new()
    assert isinstance(client, api.LedgerClient)
    writer = await client.create_ledger(3, 2, 2, password=PW)
    assert isinstance(writer, api.WriteHandle)
    reader = await client.open_ledger(writer.ledger_id, recovery=False, password=PW)
    assert isinstance(reader, api.ReadHandle)


async def test_adds_are_acknowledged_in_order_and_read_back(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW, custom={"purpose": "contract"})
    assert await writer.add_entry(b"zero") == 0
    ids = await asyncio.gather(*(writer.add_entry_async(b"e%d" % i) for i in range(1, 21)))
    assert list(ids) == list(range(1, 21))
    assert writer.last_add_confirmed == 20
    entries = await writer.read_entries(0, 20)
    assert [e.entry_id for e in entries] == list(range(21))
    assert [e.payload for e in entries] == [b"zero"] + [b"e%d" % i for i in range(1, 21)]
    assert (await writer.read_entry(3)).payload == b"e3"
    assert writer.ledger_id in await client.list_ledgers()


async def test_reads_past_the_lac_and_bad_ranges_are_refused(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW)
    await writer.add_entry(b"a")
    with pytest.raises(NoSuchEntryError):
        await writer.read_entries(0, 1)
    with pytest.raises(ValueError):
        await writer.read_entries(1, 0)
    with pytest.raises(ValueError):
        await writer.read_entries(-1, 0)


async def test_a_reader_without_recovery_sees_the_piggybacked_lac_then_the_close(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW)
    for i in range(3):
        await writer.add_entry(b"%d" % i)
    reader = await (await clients.new()).open_ledger(writer.ledger_id, recovery=False, password=PW)
    # The last entry carried the LAC before it: a tailing reader is one behind until the next add or the close.
    assert reader.last_add_confirmed == 1
    assert not reader.is_closed
    assert [e.payload for e in await reader.read_entries(0, 1)] == [b"0", b"1"]
    with pytest.raises(NoSuchEntryError):
        await reader.read_entries(0, 2)
    await writer.add_entry(b"3")  # no recovery: the writer goes on
    assert await _lac_reaches(reader, 2) >= 2
    await writer.close()
    assert await _lac_reaches(reader, 3) == 3
    assert [e.payload for e in await reader.read_entries(2, 3)] == [b"2", b"3"]


async def test_close_makes_the_ledger_final_and_stops_adds(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW)
    for payload in (b"abc", b"defg"):
        await writer.add_entry(payload)
    await writer.close()
    await writer.close()  # idempotent
    with pytest.raises(LedgerClosedError):
        await writer.add_entry(b"late")
    reopened = await (await clients.new()).open_ledger(writer.ledger_id, recovery=True, password=PW)
    assert reopened.is_closed
    assert reopened.last_add_confirmed == 1
    assert reopened.length == 7
    assert [e.payload for e in await reopened.read_entries(0, 1)] == [b"abc", b"defg"]


async def test_open_with_recovery_fences_the_writer(clients):
    writer_client, recoverer = await clients.new(), await clients.new()
    writer = await writer_client.create_ledger(3, 2, 2, password=PW)
    for i in range(2):
        await writer.add_entry(b"%d" % i)
    recovered = await recoverer.open_ledger(writer.ledger_id, recovery=True, password=PW)
    assert recovered.is_closed and recovered.last_add_confirmed == 1
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"from the fenced writer")
    with pytest.raises(LedgerFencedError):
        await writer.close()
    again = await recoverer.open_ledger(writer.ledger_id, recovery=True, password=PW)
    assert again.last_add_confirmed == 1, "nothing the fenced writer tried was kept"
    assert [e.payload for e in await again.read_entries(0, 1)] == [b"0", b"1"]


async def test_recovery_of_an_empty_ledger_closes_it_empty(clients):
    writer = await (await clients.new()).create_ledger(3, 2, 2, password=PW)
    recovered = await (await clients.new()).open_ledger(writer.ledger_id, recovery=True, password=PW)
    assert recovered.is_closed and recovered.last_add_confirmed == -1 and recovered.length == 0
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"x")


async def test_delete_removes_the_ledger(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW)
    await writer.add_entry(b"x")
    await writer.close()
    await client.delete_ledger(writer.ledger_id)
    assert writer.ledger_id not in await client.list_ledgers()
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(writer.ledger_id, recovery=False, password=PW)
    with pytest.raises(NoSuchLedgerError):
        await client.delete_ledger(writer.ledger_id)


async def test_unknown_ledgers_wrong_passwords_and_bad_quorums_are_refused(clients):
    client = await clients.new()
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(987_654_321, recovery=False, password=PW)
    with pytest.raises(NoSuchLedgerError):
        await client.open_ledger(987_654_321, recovery=True, password=PW)
    with pytest.raises(NoSuchLedgerError):
        await client.delete_ledger(987_654_321)
    writer = await client.create_ledger(3, 2, 2, password=PW)
    with pytest.raises(UnauthorizedError):
        await client.open_ledger(writer.ledger_id, recovery=True, password=b"wrong")
    await writer.add_entry(b"still writable: the refused recovery fenced nothing")
    for quorums in ((2, 3, 2), (3, 2, 3), (1, 1, 0)):
        with pytest.raises(InvalidQuorumError):
            await client.create_ledger(*quorums, password=PW)


async def test_an_entry_above_the_limit_is_refused(clients):
    client = await clients.new(ClientConfig(max_entry_bytes=1024))
    writer = await client.create_ledger(3, 2, 2, password=PW)
    with pytest.raises(FrameTooLargeError):
        await writer.add_entry(b"x" * 1025)
    assert await writer.add_entry(b"x" * 1024) == 0


async def test_closed_handles_and_clients_refuse_work(clients):
    client = await clients.new()
    writer = await client.create_ledger(3, 2, 2, password=PW)
    await writer.add_entry(b"x")
    reader = await client.open_ledger(writer.ledger_id, recovery=False, password=PW)
    await reader.close()
    with pytest.raises(ClientClosedError):
        await reader.read_entries(0, 0)
    await client.close()
    with pytest.raises(ClientClosedError):
        await client.create_ledger(3, 2, 2, password=PW)
    with pytest.raises(ClientClosedError):
        await client.open_ledger(writer.ledger_id, recovery=False, password=PW)
    with pytest.raises(ClientClosedError):
        await writer.add_entry(b"after the client closed")
