"""LogStream in process, on in-memory ledgers: the reader's no-gap rule when ledgers vanish under it."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest

from broker.streams.errors import StreamApiError
from broker.streams.policies import Placement, Policies, Rolling, dump, stream_path
from broker.streams.stream import LogStream, StreamPosition
from magnetar.topic_name import NamespaceName
from storage.client.memory import MemoryLedgerClient
from storage.managed_ledger import ManagedLedgerFactory, Position
from storage.metadata import open_store

NS = NamespaceName("public", "unit")
POLICIES = Policies(Placement(1, 1, 1, 1), Rolling(max_entries=2))


@pytest.fixture
async def stream():
    store = await open_store(f"memory://streams-{uuid.uuid4().hex[:8]}")
    factory = ManagedLedgerFactory(store, MemoryLedgerClient())
    ctx = SimpleNamespace(store=store, factory=factory, clock=time.time, cache_size_mb=0, max_entry_bytes=1 << 20)
    await store.create(stream_path(NS, "s"), dump({"writer_epoch": 0}), make_parents=True)
    loaded = await LogStream.load(ctx, NS, "s", POLICIES)
    yield loaded
    await loaded.close()
    await store.close()


async def _append(stream: LogStream, epoch: int, count: int) -> list[StreamPosition]:
    out = []
    for i in range(count):
        future, _ = stream.append(epoch, [f"{i}".encode()])
        out.append(await future)
    return out


async def test_a_reader_overtaken_by_deleted_ledgers_gets_position_truncated_not_a_gap(stream):
    epoch = await stream.open_writer()
    positions = await _append(stream, epoch, 10)  # five ledgers of two entries
    reader = stream.tail(positions[0], max_records=1)
    assert [r.sequence for r in await anext(reader)] == [0]
    await stream.ml.remove_ledgers_before(Position(positions[6].ledger_id, 0))  # as retention does: no truncation point
    with pytest.raises(StreamApiError) as info:
        await anext(reader)
    assert info.value.code_name == "PositionTruncated" and "deleted by retention" in str(info.value)


async def test_a_reader_waiting_on_an_empty_stream_follows_a_new_writer_past_the_dropped_empty_ledger(stream):
    reader = stream.tail(stream.next_position(), max_records=10)
    pending = asyncio.ensure_future(anext(reader))
    epoch = await stream.open_writer()  # drops the empty ledger the reader was waiting in
    await _append(stream, epoch, 1)
    batch = await asyncio.wait_for(pending, 10)
    assert [(r.sequence, r.data) for r in batch] == [(0, b"0")]


async def test_an_old_epoch_is_fenced_and_sequence_numbers_continue_without_gaps(stream):
    first = await stream.open_writer()
    await _append(stream, first, 3)
    in_flight = [stream.append(first, [b"late"])[0] for _ in range(3)]
    second = await stream.open_writer()
    outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
    with pytest.raises(StreamApiError) as info:
        stream.append(first, [b"after"])
    assert info.value.code_name == "WriterFenced"
    landed = sum(1 for o in outcomes if isinstance(o, StreamPosition))
    future, sequence = stream.append(second, [b"next"])
    await future
    assert sequence == 3 + landed  # failed appends of the fenced writer leave no hole
