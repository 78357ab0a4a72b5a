"""Create / add / read / close / delete against real in-process bookies (memory:// metadata)."""

import asyncio

import pytest

from storage.client import ClientConfig, LedgerClient
from storage.client.placement import write_sets
from storage.errors import (
    ClientClosedError,
    InvalidQuorumError,
    LedgerClosedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PlacementPolicyError,
    UnauthorizedError,
)
from storage.ledger_metadata import LedgerState
from storage.metadata import paths


async def test_create_add_read_close_round_trip(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2, password=b"pw", custom={"topic": "t1"})
    payloads = [b"entry-%d" % i * (i + 1) for i in range(50)]
    futures = [writer.add_entry_async(p) for p in payloads]  # pipelined: all in flight at once
    assert await asyncio.gather(*futures) == list(range(50))
    assert writer.last_add_confirmed == 49
    assert [e.payload for e in await writer.read_entries(0, 49)] == payloads

    await writer.close()
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.CLOSED
    assert (md.last_entry_id, md.length) == (49, sum(map(len, payloads)))
    assert md.custom == {"topic": "t1"}
    with pytest.raises(LedgerClosedError):
        await writer.add_entry(b"late")

    reader = await client.open_ledger(writer.ledger_id, password=b"pw")
    assert reader.is_closed and reader.last_add_confirmed == 49
    entries = await reader.read_entries(0, 49)
    assert [e.entry_id for e in entries] == list(range(50))
    assert [e.payload for e in entries] == payloads
    assert entries[-1].length == md.length
    with pytest.raises(NoSuchEntryError, match="beyond the last add confirmed 49"):
        await reader.read_entries(40, 50)
    await reader.close()
    with pytest.raises(ClientClosedError):
        await reader.read_entry(0)


async def test_add_entry_completes_in_order(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 3, 2)
    order = []
    futures = [writer.add_entry_async(b"x%d" % i) for i in range(200)]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    await asyncio.gather(*futures)
    assert order == list(range(200))
    await writer.close()


async def test_striping_puts_entry_e_on_positions_e_and_e_plus_1(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    for i in range(9):
        await writer.add_entry(b"p%d" % i)
    ensemble = writer.ensemble
    pool = client.context.pool
    for e in range(9):
        holders = {ensemble[e % 3], ensemble[(e + 1) % 3]}
        for bookie in ensemble:
            if bookie in holders:
                resp = await pool.read(bookie, writer.ledger_id, e)
                assert resp.body is not None
            else:
                with pytest.raises(NoSuchEntryError):
                    await pool.read(bookie, writer.ledger_id, e)
    await writer.close()


async def test_ensemble_is_zone_aware(cluster):
    await cluster.start_bookies(6, zones=("a", "b", "c"))
    client = await cluster.client(ClientConfig(placement_mode="strict"))
    zones = {b.bookie_id: b.zone for b in client.registry.bookies()}
    for _ in range(10):
        writer = await client.create_ledger(3, 2, 2)
        for w in write_sets(3, 2):
            assert len({zones[writer.ensemble[p]] for p in w}) == 2
        await writer.close()


async def test_strict_placement_refuses_a_single_zone(cluster):
    await cluster.start_bookies(3, zones=("only",))
    strict = await cluster.client(ClientConfig(placement_mode="strict"))
    with pytest.raises(PlacementPolicyError, match=r"need 2 zones per write set, only 1 zone \(only\) has writable bookies"):
        await strict.create_ledger(3, 2, 2)
    soft = await cluster.client()
    writer = await soft.create_ledger(3, 2, 2)
    assert any("placing anyway" in w for w in soft.stats.placement_warnings)
    await writer.add_entry(b"still works")
    await writer.close()


@pytest.mark.parametrize("e, qw, qa", [(2, 3, 1), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
async def test_invalid_quorums(cluster, e, qw, qa):
    await cluster.start_bookies(3)
    client = await cluster.client()
    with pytest.raises(InvalidQuorumError):
        await client.create_ledger(e, qw, qa)


async def test_not_enough_bookies(cluster):
    await cluster.start_bookies(2)
    client = await cluster.client()
    with pytest.raises(NotEnoughBookiesError, match="need 3 writable bookies"):
        await client.create_ledger(3, 2, 2)


async def test_ids_unique_across_clients_list_and_delete(cluster):
    await cluster.start_bookies(3)
    a, b = await cluster.client(), await cluster.client()
    handles = await asyncio.gather(*[(a if i % 2 else b).create_ledger(3, 2, 2) for i in range(10)])
    ids = [h.ledger_id for h in handles]
    assert len(set(ids)) == 10
    assert await a.list_ledgers() == sorted(ids)
    assert await cluster.store.children(paths.IDGEN) == [], "id nodes are deleted after use"
    for h in handles:
        await h.add_entry(b"x")
        await h.close()
    await b.delete_ledger(ids[3])
    assert await a.list_ledgers() == sorted(set(ids) - {ids[3]})
    with pytest.raises(NoSuchLedgerError):
        await a.delete_ledger(ids[3])
    with pytest.raises(NoSuchLedgerError):
        await a.open_ledger(ids[3])


async def test_wrong_password_is_unauthorized(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2, password=b"right")
    await writer.add_entry(b"x")
    await writer.close()
    with pytest.raises(UnauthorizedError):
        await client.open_ledger(writer.ledger_id, password=b"wrong")


async def test_empty_ledger_closes_at_minus_one(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client()
    writer = await client.create_ledger(3, 2, 2)
    await writer.close()
    md, _ = await client.get_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)
    reader = await client.open_ledger(writer.ledger_id)
    assert reader.last_add_confirmed == -1


async def test_oversized_entry_is_refused_without_harming_the_ledger(cluster):
    await cluster.start_bookies(3)
    client = await cluster.client(ClientConfig(max_entry_bytes=1024))
    writer = await client.create_ledger(3, 2, 2)
    from storage.errors import FrameTooLargeError

    with pytest.raises(FrameTooLargeError, match="exceeds max_entry_bytes"):
        await writer.add_entry(b"x" * 1025)
    assert await writer.add_entry(b"fine") == 0
    await writer.close()
