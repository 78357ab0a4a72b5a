"""Ensemble changes while writing: a bookie fails mid-stream, entries are neither lost nor reordered."""

import asyncio

import pytest

from storage.client import ClientConfig, FaultPlan
from storage.errors import (
    BookieReadOnlyError,
    BookieTimeoutError,
    BookieUnavailableError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PlacementPolicyError,
)
from storage.ledger_metadata import LedgerState
from storage.testing.waiting import wait_until_async
from tests.client.conftest import HoldingStore, wait_for_copy


async def add_all(writer, payloads):
    return await asyncio.gather(*(writer.add_entry_async(p) for p in payloads))


async def test_stopped_bookie_is_replaced_and_every_entry_survives(cluster):
    await cluster.start_bookies(4)
    client = await cluster.client(ClientConfig(add_entry_timeout_s=2.0))
    writer = await client.create_ledger(3, 2, 2)
    payloads = [b"e%03d" % i for i in range(60)]
    assert await add_all(writer, payloads[:20]) == list(range(20))
    victim = writer.ensemble[1]
    await cluster.stop_bookie(victim)

    assert await add_all(writer, payloads[20:]) == list(range(20, 60))
    md, _ = await client.get_metadata(writer.ledger_id)
    assert len(md.ensembles) == 2
    first, new_ensemble = md.ensembles[1]
    assert first == 20, "the new fragment starts right after the last acknowledged entry"
    assert victim not in new_ensemble and new_ensemble[0] == md.ensembles[0][1][0]
    assert client.stats.ensemble_changes == 1

    await writer.close()
    reader = await (await cluster.client()).open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 59)] == payloads


async def test_scripted_failure_with_many_adds_in_flight(cluster):
    await cluster.start_bookies(5)
    plan = FaultPlan()
    client = await cluster.client(faults=plan)
    writer = await client.create_ledger(3, 3, 2)
    victim = writer.ensemble[0]
    # The 30th add to the victim times out while ~100 adds are in flight.
    plan.fail_nth(victim, 30, BookieTimeoutError("scripted timeout"), ops={"add"})
    payloads = [b"m%d" % i for i in range(100)]
    order = []
    futures = [writer.add_entry_async(p) for p in payloads]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    assert await asyncio.gather(*futures) == list(range(100))
    assert order == list(range(100)), "acknowledged strictly in entry order"
    md, _ = await client.get_metadata(writer.ledger_id)
    assert victim not in md.current_ensemble
    # The failure arrived before any ack, so the new fragment may replace the first one (start 0).
    first = md.ensembles[-1][0]
    assert first <= 29 and client.stats.ensemble_changes == 1
    # The replacement really holds every entry of the new fragment.
    new_bookie = md.current_ensemble[0]
    for e in range(first, 100):  # Qa=2 < Qw=3: its copy may still be on the way when the add completes
        assert (await wait_for_copy(client, new_bookie, writer.ledger_id, e)).body is not None
    await writer.close()
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 99)] == payloads


async def test_second_failure_while_the_first_is_handled(cluster):
    """BookKeeper's HandleFailuresTest shape: a second bookie fails while the first change's
    metadata write is parked; both get replaced and every add completes in order."""
    await cluster.start_bookies(5)
    plan = FaultPlan()
    store = HoldingStore(cluster.store)
    client = await cluster.client(faults=plan, store=store)
    writer = await client.create_ledger(3, 3, 2)
    first_victim, second_victim = writer.ensemble[0], writer.ensemble[1]
    await add_all(writer, [b"a"] * 5)

    gate = store.hold_next_set()
    plan.fail_all(first_victim, BookieUnavailableError("scripted: first victim down"), ops={"add"})
    batch1 = [writer.add_entry_async(b"b%d" % i) for i in range(5)]
    await gate.reached  # change #1 is writing its fragment
    plan.fail_all(second_victim, BookieReadOnlyError("scripted: second victim read-only"), ops={"add"})
    batch2 = [writer.add_entry_async(b"c%d" % i) for i in range(5)]
    await wait_until_async(lambda: len(writer._to_replace) == 2, 5, "the second failure to be noticed")
    assert not any(f.done() for f in batch1 + batch2), "nothing completes during an ensemble change"
    gate.release()

    assert await asyncio.gather(*batch1, *batch2) == list(range(5, 15))
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.ensembles[0][0] == 0 and md.ensembles[-1][0] == 5
    assert first_victim not in md.current_ensemble and second_victim not in md.current_ensemble
    assert md.current_ensemble[2] == writer.ensemble[2]
    assert client.stats.ensemble_changes == 2
    expected = [b"a"] * 5 + [b"b%d" % i for i in range(5)] + [b"c%d" % i for i in range(5)]
    assert [e.payload for e in await writer.read_entries(0, 14)] == expected
    await writer.close()


async def test_no_replacement_fails_adds_and_close_keeps_acknowledged_entries(cluster):
    await cluster.start_bookies(3)
    plan = FaultPlan()
    client = await cluster.client(faults=plan)
    writer = await client.create_ledger(3, 2, 2)
    await add_all(writer, [b"ok"] * 10)
    plan.fail_all(writer.ensemble[2], BookieUnavailableError("scripted: gone"), ops={"add"})
    results = await asyncio.gather(*(writer.add_entry_async(b"x") for _ in range(6)), return_exceptions=True)
    assert any(isinstance(r, NotEnoughBookiesError) for r in results)
    # Entries whose write set avoids the dead bookie may have completed first; the rest failed.
    acked = [r for r in results if isinstance(r, int)]
    assert acked == list(range(10, 10 + len(acked)))
    assert isinstance(writer.failure, NotEnoughBookiesError)
    with pytest.raises(NotEnoughBookiesError):
        await writer.add_entry(b"after")
    await writer.close()
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == writer.last_add_confirmed == 9 + len(acked)


async def test_ensemble_change_loses_to_a_recovery_and_the_writer_is_fenced(cluster):
    await cluster.start_bookies(4)
    plan = FaultPlan()
    store = HoldingStore(cluster.store)
    client = await cluster.client(faults=plan, store=store)
    writer = await client.create_ledger(3, 2, 2)
    await add_all(writer, [b"v%d" % i for i in range(4)])
    victim = writer.ensemble[0]
    gate = store.hold_next_set()
    plan.fail_all(victim, BookieTimeoutError("scripted"), ops={"add"})
    pending = [writer.add_entry_async(b"w%d" % i) for i in range(3)]
    await gate.reached  # the writer's ensemble change is about to write metadata

    reader = await (await cluster.client()).open_ledger(writer.ledger_id)
    assert reader.is_closed
    gate.release()  # the writer's conditional write now fails on the version

    for fut in pending:
        with pytest.raises(LedgerFencedError):
            await fut
    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"after recovery")
    with pytest.raises(LedgerFencedError):
        await writer.close()
    # Entries 4.. never reached Qa (the victim failed and the queue was held), yet recovery may
    # legitimately keep some that reached a replica; everything acknowledged is there.
    assert reader.last_add_confirmed >= 3
    assert [e.payload for e in await reader.read_entries(0, 3)] == [b"v%d" % i for i in range(4)]
    md, _ = await client.get_metadata(writer.ledger_id)
    assert len(md.ensembles) == 1, "the fenced writer's fragment never made it into the metadata"


async def test_read_only_bookie_is_replaced_and_never_chosen_again(cluster):
    await cluster.start_bookies(4)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    await add_all(writer, [b"r"] * 5)
    victim = writer.ensemble[2]
    await cluster.services[victim].force_read_only(True)
    await client.registry.wait_for(lambda r: r.get(victim) is not None and not r.get(victim).writable, 5)
    assert await add_all(writer, [b"s"] * 10) == list(range(5, 15))
    assert victim not in writer.ensemble
    for _ in range(5):
        other = await client.create_ledger(3, 2, 2)
        assert victim not in other.ensemble
        await other.close()
    await writer.close()
    # Read-only bookies still serve reads of what they hold.
    reader = await client.open_ledger(writer.ledger_id)
    assert [e.payload for e in await reader.read_entries(0, 14)] == [b"r"] * 5 + [b"s"] * 10


async def test_deleted_ledger_stops_its_writer(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    await writer.add_entry(b"before")
    await (await cluster.client()).delete_ledger(writer.ledger_id)

    async def next_add_fails():
        try:
            await writer.add_entry(b"after")
        except NoSuchLedgerError:
            return True
        return False

    # Bookies learn of the deletion through their metadata watch: a few adds may still land.
    deadline = asyncio.get_running_loop().time() + 5
    while not await next_add_fails():
        assert asyncio.get_running_loop().time() < deadline, "bookies kept accepting adds to a deleted ledger"
    assert isinstance(writer.failure, NoSuchLedgerError)
    assert client.stats.ensemble_changes == 0, "a deleted ledger is not a bookie failure"
    with pytest.raises(NoSuchLedgerError):
        await writer.close()


async def test_a_ledgers_own_min_zones_holds_at_creation_and_in_its_ensemble_changes(cluster):
    """The client's rule is soft; ``min_zones`` makes this one ledger strict, for its whole life."""
    await cluster.start_bookies(4)  # zone-a, zone-b, zone-c, zone-a
    client = await cluster.client(ClientConfig(add_entry_timeout_s=2.0))
    await client.check_placement(3, 3, 2, min_zones=3)
    writer = await client.create_ledger(3, 3, 2, min_zones=3)
    assert await add_all(writer, [b"a", b"b"]) == [0, 1]
    zone_c = next(b for b in writer.ensemble if client.registry.get(b).zone == "zone-c")
    await cluster.stop_bookie(zone_c)
    with pytest.raises(PlacementPolicyError):  # the only replacement is a second zone-a bookie
        await add_all(writer, [b"c"])
    with pytest.raises(PlacementPolicyError):
        await client.check_placement(3, 3, 2, min_zones=3)
    with pytest.raises(PlacementPolicyError):
        await client.create_ledger(3, 3, 2, min_zones=3)
    other = await client.create_ledger(3, 3, 2)  # the client's own soft rule still places on two zones
    assert await other.add_entry(b"x") == 0
