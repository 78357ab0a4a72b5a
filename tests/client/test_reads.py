"""Reads: replica fallback, corrupt copies reported, batch reads, LAC and tailing an open ledger."""

import asyncio

import pytest

from storage.client import ClientConfig, FaultPlan
from storage.errors import BookieUnavailableError, NoSuchEntryError, ReadEntryError
from storage.testing.waiting import wait_until_async


async def closed_ledger(client, n, e=3, qw=2, qa=2):
    writer = await client.create_ledger(e, qw, qa)
    payloads = [b"d%d" % i for i in range(n)]
    await asyncio.gather(*(writer.add_entry_async(p) for p in payloads))
    await writer.close()
    return writer, payloads


async def test_read_falls_back_when_a_bookie_is_down(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer, payloads = await closed_ledger(client, 30)
    await cluster.stop_bookie(writer.ensemble[0])
    reader_client = await cluster.client(ClientConfig(connect_timeout_s=1.0))
    reader = await reader_client.open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 29)] == payloads


async def test_corrupt_copy_is_skipped_and_reported(cluster):
    await cluster.start_bookies(3)
    writer, payloads = await closed_ledger(await cluster.client(), 12)
    plan = FaultPlan()
    client = await cluster.client(faults=plan)
    reported = []
    client.context.on_bad_replica.append(reported.append)
    bad = writer.ensemble[1]
    plan.corrupt_reads(bad)
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 11)] == payloads
    # Entries whose first replica is the bad bookie: e % 3 == 1 (write set starts there).
    first_choice = [e for e in range(12) if e % 3 == 1]
    assert sorted(r.entry_id for r in reported) == first_choice
    assert {r.bookie_id for r in reported} == {bad}
    assert client.stats.digest_mismatches == len(first_choice)
    assert "digest mismatch" in reported[0].reason


async def test_unreadable_entry_names_every_replica(cluster):
    await cluster.start_bookies(3)
    writer, _ = await closed_ledger(await cluster.client(), 3)
    plan = FaultPlan()
    client = await cluster.client(faults=plan)
    for b in writer.ensemble:
        plan.corrupt_reads(b)
    reader = await client.open_ledger(writer.ledger_id)
    with pytest.raises(ReadEntryError, match="unreadable") as info:
        await reader.read_entry(0)
    for b in writer.metadata.write_set(0):
        assert b in str(info.value)


async def test_batch_reads_when_every_bookie_holds_every_entry(cluster):
    await cluster.start_bookies(2)
    plan = FaultPlan()
    client = await cluster.client(ClientConfig(batch_read_max_entries=50), faults=plan)
    writer, payloads = await closed_ledger(client, 300, e=2, qw=2, qa=2)
    reader = await client.open_ledger(writer.ledger_id)
    plan.requests.clear()
    assert [e.payload for e in await reader.read_entries(0, 299)] == payloads
    ops = [op for _, op in plan.requests]
    assert ops.count("batch_read") >= 6 and ops.count("read") == 0


async def test_batch_read_falls_back_on_a_corrupt_bookie(cluster):
    await cluster.start_bookies(2)
    plan = FaultPlan()
    client = await cluster.client(faults=plan)
    writer, payloads = await closed_ledger(client, 40, e=2, qw=2, qa=2)
    reader = await client.open_ledger(writer.ledger_id)
    plan.corrupt_reads(writer.ensemble[0])
    assert [e.payload for e in await reader.read_entries(0, 39)] == payloads
    assert client.stats.digest_mismatches >= 1
    assert {r.bookie_id for r in client.stats.bad_replicas} == {writer.ensemble[0]}


async def test_tailing_an_open_ledger(cluster):
    await cluster.start_bookies(3)
    writer_client, tail_client = await cluster.client(), await cluster.client()
    writer = await writer_client.create_ledger(3, 2, 2)
    for i in range(5):  # one at a time, so each entry piggybacks the LAC of the one before
        await writer.add_entry(b"t%d" % i)
    tail = await tail_client.open_ledger(writer.ledger_id, recovery=False)
    assert not tail.is_closed
    assert tail.last_add_confirmed == 3, "bookies know the LAC piggybacked on entry 4"
    assert [e.payload for e in await tail.read_entries(0, 3)] == [b"t%d" % i for i in range(4)]
    with pytest.raises(NoSuchEntryError):
        await tail.read_entry(4)

    waiter = asyncio.ensure_future(tail.wait_for_lac(7, timeout_s=10))
    for i in range(5, 10):
        await writer.add_entry(b"t%d" % i)
    assert await waiter >= 7
    assert [e.payload for e in await tail.read_entries(4, 7)] == [b"t%d" % i for i in range(4, 8)]

    with pytest.raises(TimeoutError):
        await tail.wait_for_lac(100, timeout_s=0.2)

    await writer.close()
    await wait_until_async(lambda: tail.is_closed, 5, "the tailing handle to see the close")
    assert tail.last_add_confirmed == 9
    assert await tail.wait_for_lac(100, timeout_s=1) == 9, "a closed ledger never grows"
    assert (await tail.read_entry(9)).payload == b"t9"
    # The writer was never fenced by the tailing reader.
    assert writer.failure is None


async def test_tailing_follows_an_ensemble_change(cluster):
    await cluster.start_bookies(4)
    plan = FaultPlan()
    writer_client = await cluster.client(faults=plan)
    writer = await writer_client.create_ledger(3, 2, 2)
    await asyncio.gather(*(writer.add_entry_async(b"f%d" % i) for i in range(6)))
    tail = await (await cluster.client()).open_ledger(writer.ledger_id, recovery=False)
    victim = writer.ensemble[0]
    plan.fail_all(victim, BookieUnavailableError("scripted"), ops={"add"})
    for i in range(6, 20):
        await writer.add_entry(b"f%d" % i)
    await wait_until_async(lambda: len(tail.metadata.ensembles) == 2, 5, "the tail to see the new fragment")
    assert await tail.wait_for_lac(18, timeout_s=10) >= 18
    assert [e.payload for e in await tail.read_entries(0, 18)] == [b"f%d" % i for i in range(19)]
    await writer.close()
