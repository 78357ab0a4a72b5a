"""Open with recovery: fencing the old writer, reading forward past the LAC, concurrent recoverers."""

import asyncio

import pytest

from storage.client import ClientConfig, FaultPlan
from storage.errors import LedgerFencedError, LedgerRecoveryError, NoSuchEntryError
from storage.ledger_metadata import LedgerState
from tests.client.conftest import wait_for_copy


async def write(writer, n, prefix=b"r"):
    return await asyncio.gather(*(writer.add_entry_async(prefix + b"%d" % i) for i in range(n)))


async def test_recovery_fences_the_writer_and_closes_at_the_last_acknowledged_entry(cluster):
    await cluster.start_bookies(3)
    writer_client, reader_client = await cluster.client(), await cluster.client()
    writer = await writer_client.create_ledger(3, 2, 2)
    acked = await write(writer, 10)
    assert acked[-1] == 9
    # Pipelined adds all piggyback LAC -1: recovery must read forward to find every entry.
    reader = await reader_client.open_ledger(writer.ledger_id)
    assert reader.is_closed and reader.last_add_confirmed == 9
    md, _ = await reader_client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 9
    assert md.length == sum(len(b"r%d" % i) for i in range(10))
    assert [e.payload for e in await reader.read_entries(0, 9)] == [b"r%d" % i for i in range(10)]

    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"too late")
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"still too late")
    with pytest.raises(LedgerFencedError):
        await writer.close()
    assert reader_client.stats.recoveries == 1


async def test_entry_on_one_replica_is_recovered_to_its_whole_write_set(cluster):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    writer_client = await cluster.client(faults=plan)
    writer = await writer_client.create_ledger(3, 3, 2)
    await write(writer, 9)
    e0, e1, e2 = writer.ensemble
    # Entry 9 (write set starts at position 0) reaches e0 only: its copies to e1 and e2 are parked.
    holds = [plan.hold_next(b, ops={"add"}) for b in (e1, e2)]
    pending = writer.add_entry_async(b"r9")
    for h in holds:
        await h.reached
    await wait_for_copy(writer_client, e0, writer.ledger_id, 9)

    reader_client = await cluster.client()
    reader = await reader_client.open_ledger(writer.ledger_id)
    assert reader.last_add_confirmed == 9, "found on a replica before the missing threshold: recovered"
    for bookie in (e1, e2):
        assert (await wait_for_copy(reader_client, bookie, writer.ledger_id, 9)).body is not None
    for h in holds:
        h.release()  # the parked copies now reach fenced bookies
    with pytest.raises(LedgerFencedError):
        await pending


async def test_entry_missing_on_enough_replicas_ends_the_ledger(cluster):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    writer_client = await cluster.client(faults=plan)
    writer = await writer_client.create_ledger(3, 3, 3)  # Qw - Qa + 1 = 1: one missing copy settles it
    await write(writer, 9)
    e0, e1, e2 = writer.ensemble
    holds = [plan.hold_next(b, ops={"add"}) for b in (e0, e1)]  # entry 9 reaches only e2
    pending = writer.add_entry_async(b"r9")
    for h in holds:
        await h.reached
    await wait_for_copy(writer_client, e2, writer.ledger_id, 9)
    reader = await (await cluster.client()).open_ledger(writer.ledger_id)
    assert reader.last_add_confirmed == 8
    with pytest.raises(NoSuchEntryError):
        await reader.read_entry(9)
    for h in holds:
        h.release()
    with pytest.raises(LedgerFencedError):
        await pending


async def test_concurrent_recoverers_converge(cluster):
    await cluster.start_bookies(3)
    writer = await (await cluster.client()).create_ledger(3, 3, 2)
    await write(writer, 20)
    a, b, c = await cluster.client(), await cluster.client(), await cluster.client()
    handles = await asyncio.gather(*(x.open_ledger(writer.ledger_id) for x in (a, b, c)))
    assert {h.last_add_confirmed for h in handles} == {19}
    assert {h.metadata.length for h in handles} == {handles[0].metadata.length}


async def test_a_recoverer_that_loses_the_race_adopts_the_closed_state(cluster):
    await cluster.start_bookies(3)
    writer = await (await cluster.client()).create_ledger(3, 3, 2)
    await write(writer, 12)
    slow_plan = FaultPlan()
    slow = await cluster.client(faults=slow_plan)
    holds = [slow_plan.hold_next(b, ops={"fence_read"}) for b in writer.ensemble]
    slow_open = asyncio.ensure_future(slow.open_ledger(writer.ledger_id))
    for h in holds:
        await h.reached  # slow has marked IN_RECOVERY and is fencing

    fast = await cluster.client()
    fast_handle = await fast.open_ledger(writer.ledger_id)
    assert fast_handle.last_add_confirmed == 11
    for h in holds:
        h.release()
    slow_handle = await slow_open
    assert slow_handle.is_closed
    assert (slow_handle.last_add_confirmed, slow_handle.metadata.length) == (11, fast_handle.metadata.length)


async def test_recovery_with_a_dead_bookie_changes_the_ensemble(cluster):
    await cluster.start_bookies(4)
    writer = await (await cluster.client()).create_ledger(3, 2, 2)
    await write(writer, 10)
    dead = writer.ensemble[(9 + 1) % 3]  # holds entry 9, which recovery must re-add
    await cluster.stop_bookie(dead)
    reader_client = await cluster.client(ClientConfig(add_entry_timeout_s=2.0))
    reader = await reader_client.open_ledger(writer.ledger_id)
    assert reader.last_add_confirmed == 9
    assert [e.payload for e in await reader.read_entries(0, 9)] == [b"r%d" % i for i in range(10)]
    md = reader.metadata
    assert md.state is LedgerState.CLOSED and dead not in md.current_ensemble


async def test_recovery_fails_retriably_when_too_few_bookies_answer(cluster):
    await cluster.start_bookies(3)
    writer = await (await cluster.client()).create_ledger(3, 3, 2)
    await write(writer, 3)
    for bookie in writer.ensemble[:2]:
        await cluster.stop_bookie(bookie)
    client = await cluster.client(ClientConfig(recovery_max_attempts=2, read_timeout_s=1.0, connect_timeout_s=1.0))
    with pytest.raises(LedgerRecoveryError, match="could not fence enough bookies") as info:
        await client.open_ledger(writer.ledger_id)
    assert info.value.retriable
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.IN_RECOVERY


async def test_recovery_of_a_closed_ledger_is_a_no_op(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    await write(writer, 5)
    await writer.close()
    _, version = await client.get_metadata(writer.ledger_id)
    reader = await client.open_ledger(writer.ledger_id)
    assert reader.version == version and reader.last_add_confirmed == 4


async def test_writer_metadata_conflict_after_recovery_marks_in_recovery(cluster):
    """A recoverer marks IN_RECOVERY then stalls; the writer's close loses on the version."""
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    await write(writer, 3)
    plan = FaultPlan()
    stalled = await cluster.client(faults=plan)
    holds = [plan.hold_next(b, ops={"fence_read"}) for b in writer.ensemble]
    task = asyncio.ensure_future(stalled.open_ledger(writer.ledger_id))
    for h in holds:
        await h.reached
    with pytest.raises(LedgerFencedError, match="recovered by another client"):
        await writer.close()
    for h in holds:
        h.release()
    assert (await task).last_add_confirmed == 2


async def test_recovery_read_waits_for_an_add_still_in_a_slow_bookies_journal(cluster):
    """Entry 9 sits in e0's journal, written but not yet fsynced, while another client recovers.

    Fenced e1 and e2 answer the fence; e0's answer waits behind the held fsync,
    so recovery goes on without it. If recovery then takes e0's "no entry 9"
    for "never had it", it closes the ledger at 8 -- and when the fsync
    completes, e0 acknowledges entry 9 to the old writer, which now has its
    ack quorum (e0 + e2) for an entry that is not in the ledger.
    """
    await cluster.start_bookies(3)
    writer_plan = FaultPlan()
    writer_client = await cluster.client(faults=writer_plan)
    writer = await writer_client.create_ledger(3, 3, 2)
    await write(writer, 9)
    e0, e1, e2 = writer.ensemble  # entry 9's write set starts at position 0: e0 is asked first
    fsync = cluster.journal_faults[e0].hold_next_fsync()
    e1_copy = writer_plan.hold_next(e1, ops={"add"})
    pending = writer.add_entry_async(b"r9")
    await fsync.reached
    await e1_copy.reached
    await wait_for_copy(writer_client, e2, writer.ledger_id, 9)

    reader_plan = FaultPlan()
    reader_client = await cluster.client(faults=reader_plan)
    to_e0 = reader_plan.hold_next(e0, ops={"read", "fence_read"}, entry_id=9)
    recovery = asyncio.ensure_future(reader_client.open_ledger(writer.ledger_id))
    await to_e0.reached  # e1 and e2 are fenced; recovery asks e0 for entry 9
    to_e0.release()
    await asyncio.sleep(0)  # one loop turn: the release callback queues the read on e0's connection
    # Queued behind it on the same connection: once this is answered, e0 has taken the entry-9 read.
    await reader_client.context.pool.read_lac(e0, writer.ledger_id)
    fsync.release()

    reader = await recovery
    assert await pending == 9, "e0 and e2 make the ack quorum: entry 9 is acknowledged to the writer"
    assert reader.last_add_confirmed == 9, "an acknowledged entry is missing from the recovered ledger"
    assert (await reader.read_entry(9)).payload == b"r9"
    e1_copy.release()  # reaches a fenced bookie; the add was acknowledged already
