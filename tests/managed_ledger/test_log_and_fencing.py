"""The log itself: order across rollovers, reopen, fencing of a previous owner, bad input."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from storage.errors import (
    InvalidManagedLedgerNameError, ManagedLedgerConfigError, ManagedLedgerFencedError, PlacementPolicyError,
)
from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory, Position

SMALL = ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_rollover_time_s=0)


async def _factory(ledgers, **kw):
    client = await ledgers.client()
    return ManagedLedgerFactory(ledgers.store, client, **kw)


async def _read_all(ml, start=None):
    reader = ml.new_non_durable_cursor(start=start)
    out = []
    while entries := await reader.read_entries(7):
        out.extend(entries)
    await reader.close()
    return out


async def test_adds_keep_their_order_across_rollovers(ledgers):
    await ledgers.start_bookies(3)
    factory = await _factory(ledgers)
    ml = await factory.open("t/ns/persistent/order", SMALL)
    positions = await asyncio.gather(*(ml.add_entry(f"e{i}".encode()) for i in range(23)))
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions}) >= 4, "5 entries per ledger: the log rolled over"
    assert [e.data for e in await _read_all(ml)] == [f"e{i}".encode() for i in range(23)]
    assert ml.number_of_entries == 23


async def test_reopen_recovers_everything_and_starts_a_new_ledger(ledgers):
    await ledgers.start_bookies(3)
    factory = await _factory(ledgers)
    ml = await factory.open("t/ns/persistent/reopen", SMALL)
    for i in range(7):
        await ml.add_entry(f"e{i}".encode())
    last_ledger = ml.current_ledger_id
    # no close: the next owner must recover the open ledger by itself
    other = await _factory(ledgers)
    ml2 = await other.open("t/ns/persistent/reopen", SMALL)
    assert ml2.current_ledger_id != last_ledger
    assert [e.data for e in await _read_all(ml2)] == [f"e{i}".encode() for i in range(7)]
    await ml2.add_entry(b"after")
    assert (await _read_all(ml2))[-1].data == b"after"


async def test_a_new_owner_fences_the_old_one(ledgers):
    await ledgers.start_bookies(3)
    old = await (await _factory(ledgers)).open("t/ns/persistent/fence")
    await old.add_entry(b"before")
    new = await (await _factory(ledgers)).open("t/ns/persistent/fence")
    with pytest.raises(ManagedLedgerFencedError):
        await old.add_entry(b"from the old owner")
    with pytest.raises(ManagedLedgerFencedError):
        await old.open_cursor("late-sub")  # every later operation fails too
    await new.add_entry(b"from the new owner")
    assert [e.data for e in await _read_all(new)] == [b"before", b"from the new owner"]


async def test_metadata_write_of_a_fenced_owner_fails_on_version(ledgers):
    await ledgers.start_bookies(3)
    old = await (await _factory(ledgers)).open("t/ns/persistent/fence-md", SMALL)
    await (await _factory(ledgers)).open("t/ns/persistent/fence-md", SMALL)
    with pytest.raises(ManagedLedgerFencedError):
        await old.write_info()


@pytest.mark.parametrize("name", ["", "/abs", "trailing/", "a//b", "a/../b"])
async def test_invalid_names_are_refused(ledgers, name):
    await ledgers.start_bookies(3)
    factory = await _factory(ledgers)
    with pytest.raises(InvalidManagedLedgerNameError):
        await factory.open(name)


def test_invalid_config_names_the_field():
    with pytest.raises(ManagedLedgerConfigError, match="max_entries_per_ledger"):
        ManagedLedgerConfig(max_entries_per_ledger=0).validate()
    with pytest.raises(ManagedLedgerConfigError, match="write quorum"):
        ManagedLedgerConfig(ensemble_size=2, write_quorum_size=3).validate()


async def test_tailing_reader_is_served_from_the_cache(ledgers):
    await ledgers.start_bookies(3)
    ml = await (await _factory(ledgers)).open("t/ns/persistent/cache")
    cursor = await ml.open_cursor("tail", InitialPosition.LATEST)
    waiter = asyncio.ensure_future(cursor.read_entries_or_wait(10))
    await asyncio.sleep(0)  # let the read reach its wait (scheduling, not synchronisation)
    assert not waiter.done()
    await ml.add_entry(b"x")
    entries = await asyncio.wait_for(waiter, 5)
    assert [e.data for e in entries] == [b"x"]
    misses = ml.stats["cache_misses"]
    for i in range(50):
        await ml.add_entry(b"y%d" % i)
        assert len(await cursor.read_entries(10)) == 1
    assert ml.stats["cache_misses"] == misses and ml.stats["cache_hits"] >= 51


async def test_waiting_read_can_be_cancelled_without_moving_the_cursor(ledgers):
    await ledgers.start_bookies(3)
    ml = await (await _factory(ledgers)).open("t/ns/persistent/cancel")
    cursor = await ml.open_cursor("c", InitialPosition.LATEST)
    before = cursor.read_position
    waiter = asyncio.ensure_future(cursor.read_entries_or_wait(10))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert cursor.read_position == before
    await ml.add_entry(b"z")
    assert [e.data for e in await cursor.read_entries(10)] == [b"z"]
    assert isinstance(cursor.read_position, Position)


def test_min_zones_must_fit_the_write_quorum():
    with pytest.raises(ManagedLedgerConfigError, match="min_zones"):
        ManagedLedgerConfig(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, min_zones=3).validate()
    with pytest.raises(ManagedLedgerConfigError, match="min_zones"):
        ManagedLedgerConfig(min_zones=0).validate()


async def test_min_zones_reaches_every_data_ledger_and_is_strict(cluster):
    """The ledger client's own rule is soft (two zones would do, with a warning); the config's is not."""
    await cluster.start_bookies(4, zones=("zone-a", "zone-b"))
    client = await cluster.client()
    factory = ManagedLedgerFactory(cluster.store, client)
    config = ManagedLedgerConfig(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2, min_zones=3,
                                 max_entries_per_ledger=2, min_ledger_rollover_time_s=0)
    with pytest.raises(PlacementPolicyError):
        await factory.open("t/ns/persistent/three-zones", config)
    ml = await factory.open("t/ns/persistent/two-zones", dataclasses.replace(config, min_zones=2))
    for i in range(5):
        await ml.add_entry(b"%d" % i)
    zone_of = {b.bookie_id: b.zone for b in client.registry.bookies()}
    ledgers = [info.ledger_id for info in ml.info.ledgers]
    assert len(ledgers) >= 3
    for ledger_id in ledgers:
        md, _ = await client.get_metadata(ledger_id)
        assert len({zone_of[b] for b in md.ensembles[0][1]}) == 2
