"""Auditor and replication workers against in-process bookies: lost bookies, open ledgers, racing workers."""

from __future__ import annotations

import asyncio

import pytest

from storage.autorecovery import checker
from storage.autorecovery.auditor import Auditor
from storage.autorecovery.config import AutoRecoveryConfig
from storage.autorecovery.underreplication import Mark, UnderReplication
from storage.autorecovery.worker import LedgerRepair, Outcome, ReplicationWorker
from storage.client import ClientConfig, FaultPlan
from storage.errors import NoSuchEntryError, ReplicationError
from storage.ledger_metadata import LedgerState
from storage.testing.waiting import wait_until_async

CONFIG = AutoRecoveryConfig(lost_bookie_recovery_delay_s=5.0, open_ledger_rereplication_grace_period_s=10.0,
                            replication_poll_interval_s=0.05)
ZONES = ("zone-a", "zone-b", "zone-c")


def payload(lid: int, i: int) -> bytes:
    return f"ledger {lid} entry {i} ".encode() * 4


async def write_ledger(client, n: int, ensemble=(3, 2, 2), close: bool = True):
    handle = await client.create_ledger(*ensemble, password=b"pw")
    await asyncio.gather(*(handle.add_entry_async(payload(handle.ledger_id, i)) for i in range(n)))
    if close:
        await handle.close()
    return handle


async def read_back(client, lid: int) -> list[bytes]:
    reader = await client.open_ledger(lid, recovery=False, password=b"pw")
    try:
        return [e.payload for e in await reader.read_entries(0, reader.last_add_confirmed)]
    finally:
        await reader.close()


def assert_zone_rule(md, zone_of) -> None:
    for first, ensemble in md.ensembles:
        for s in range(len(ensemble)):
            ws = [ensemble[(s + k) % len(ensemble)] for k in range(md.write_quorum_size)]
            assert len({zone_of(b) for b in ws}) >= 2, f"write set {ws} of fragment {first} is in one zone"


async def mark_lost(rcluster, client, clock, victim: str) -> Auditor:
    """Stop the victim and let an auditor (manual clock) find the loss after the delay."""
    auditor = Auditor(client, CONFIG, "auditor-test", clock=clock)
    await auditor.tick()  # sees everyone registered
    await rcluster.stop_bookie(victim)
    await client.registry.wait_for(lambda r: not r.is_registered(victim), 5)
    await auditor.tick()
    assert await UnderReplication(client.context.store).list() == [], "nothing is marked before the delay"
    clock.advance(CONFIG.lost_bookie_recovery_delay_s + 0.1)
    await auditor.tick()
    return auditor


async def test_lost_bookie_is_rereplicated_zone_aware_and_survives_a_second_loss(rcluster, clock):
    # Two bookies per zone: with E3/Qw2 over three zones, only a bookie of the lost one's zone
    # can keep both write sets through its position across two zones.
    ids = await rcluster.start_bookies(6, zones=ZONES)
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0, read_timeout_s=2.0))
    ledgers = [await write_ledger(client, 120) for _ in range(4)]
    victim = next(b for b in ids if sum(b in h.ensemble for h in ledgers) >= 2)
    holding = sorted(h.ledger_id for h in ledgers if victim in h.ensemble)

    await mark_lost(rcluster, client, clock, victim)
    marks = UnderReplication(client.context.store)
    assert await marks.list() == holding

    worker = ReplicationWorker(client, CONFIG, "worker-test", clock=clock)
    assert await worker.run_once() == len(holding)
    assert await marks.list() == []
    assert worker.stats.entries > 0 and worker.stats.bytes > 0
    for h in ledgers:
        md, _ = await client.get_metadata(h.ledger_id)
        assert victim not in checker.bookies_of(md)
        assert md.is_closed and md.last_entry_id == 119
        assert_zone_rule(md, rcluster.zone_of)
        assert await read_back(client, h.ledger_id) == [payload(h.ledger_id, i) for i in range(120)]

    # A second original bookie goes: every entry still has a live copy.
    second = next(b for b in ids if b != victim and any(b in h.ensemble for h in ledgers))
    await rcluster.stop_bookie(second)
    fresh = await rcluster.client(ClientConfig(read_timeout_s=2.0))
    for h in ledgers:
        assert await read_back(fresh, h.ledger_id) == [payload(h.ledger_id, i) for i in range(120)]


async def test_open_ledger_earlier_fragment_is_repaired_while_its_writer_keeps_writing(rcluster, clock):
    await rcluster.start_bookies(5, zones=ZONES)
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0, read_timeout_s=2.0))
    writer = await write_ledger(client, 50, close=False)
    victim = writer.ensemble[0]
    await mark_lost(rcluster, client, clock, victim)
    # The writer replaces the victim on its next add: fragment 0 still names it.
    await asyncio.gather(*(writer.add_entry_async(payload(writer.ledger_id, i)) for i in range(50, 80)))
    md, _ = await client.get_metadata(writer.ledger_id)
    assert victim in md.ensembles[0][1] and victim not in md.current_ensemble

    worker = ReplicationWorker(client, CONFIG, "w", clock=clock)
    await worker.run_once()
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.OPEN and victim not in checker.bookies_of(md)
    assert await UnderReplication(client.context.store).list() == []

    # The writer adopts the repaired fragment: it keeps adding and closes normally.
    await asyncio.gather(*(writer.add_entry_async(payload(writer.ledger_id, i)) for i in range(80, 100)))
    await writer.close()
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.is_closed and md.last_entry_id == 99 and victim not in checker.bookies_of(md)
    assert await read_back(client, writer.ledger_id) == [payload(writer.ledger_id, i) for i in range(100)]


async def test_dead_writers_ledger_is_fenced_only_after_the_grace_period(rcluster, clock):
    await rcluster.start_bookies(4, zones=ZONES)
    writer_client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0))
    writer = await write_ledger(writer_client, 40, close=False)
    lid, victim = writer.ledger_id, writer.ensemble[1]
    await writer_client.close()  # the writer dies with its ledger open
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0, read_timeout_s=2.0))
    await mark_lost(rcluster, client, clock, victim)

    worker = ReplicationWorker(client, CONFIG, "w", clock=clock)
    assert await worker.run_once() == 0
    md, _ = await client.get_metadata(lid)
    assert md.state is LedgerState.OPEN, "no fencing within the grace period"
    clock.advance(CONFIG.open_ledger_rereplication_grace_period_s + 0.1)
    assert await worker.run_once() == 1
    md, _ = await client.get_metadata(lid)
    assert md.is_closed and md.last_entry_id == 39 and victim not in checker.bookies_of(md)
    assert await read_back(client, lid) == [payload(lid, i) for i in range(40)]


async def test_missing_entry_on_a_live_bookie_is_rewritten_in_place(rcluster):
    await rcluster.start_bookies(3, zones=ZONES)
    plan = FaultPlan()
    client = await rcluster.client(ClientConfig(read_timeout_s=2.0), faults=plan)
    h = await write_ledger(client, 30, ensemble=(3, 3, 2))
    bad = h.ensemble[2]
    plan.fail_nth(bad, 1, NoSuchEntryError("scripted: entry lost on disk"), ops={"read"})
    outcome = await LedgerRepair(client.context, h.ledger_id, Mark(check=True)).run()
    assert outcome is Outcome.REPAIRED
    assert (bad, "recovery_add") in plan.requests, "the missing entry must be re-written onto the same bookie"
    md, _ = await client.get_metadata(h.ledger_id)
    assert md.ensembles == ((0, h.ensemble),), "a live bookie keeps its place"


async def test_two_workers_racing_on_one_ledger_converge(rcluster, clock):
    ids = await rcluster.start_bookies(5, zones=ZONES)
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0, read_timeout_s=2.0))
    h = await write_ledger(client, 100)
    victim = h.ensemble[0]
    await mark_lost(rcluster, client, clock, victim)
    mark, _ = await UnderReplication(client.context.store).get(h.ledger_id)

    plan = FaultPlan()
    slow_client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0, read_timeout_s=2.0), faults=plan)
    hold = plan.hold_next(None, ops={"recovery_add"})
    slow = asyncio.ensure_future(LedgerRepair(slow_client.context, h.ledger_id, mark).run())
    await hold.reached  # the slow worker is mid-copy
    assert await LedgerRepair(client.context, h.ledger_id, mark).run() is Outcome.REPAIRED
    after_fast, version = await client.get_metadata(h.ledger_id)
    hold.release()
    with pytest.raises(ReplicationError, match="changed by someone else"):
        await slow
    md, version2 = await client.get_metadata(h.ledger_id)
    assert (md.ensembles, version2) == (after_fast.ensembles, version), "the loser changes nothing"
    assert victim not in checker.bookies_of(md)
    # The next look finds nothing left to copy.
    assert await LedgerRepair(slow_client.context, h.ledger_id, mark).run() is Outcome.REPAIRED
    assert (await client.get_metadata(h.ledger_id))[1] == version
    assert await read_back(client, h.ledger_id) == [payload(h.ledger_id, i) for i in range(100)]
    assert set(ids) - {victim} >= set(md.current_ensemble)


async def test_new_auditor_finds_a_loss_that_happened_before_it_was_elected(rcluster, clock):
    await rcluster.start_bookies(4, zones=ZONES)
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0))
    h = await write_ledger(client, 20)
    victim = h.ensemble[0]
    await rcluster.stop_bookie(victim)
    await client.registry.wait_for(lambda r: not r.is_registered(victim), 5)

    auditor = Auditor(client, CONFIG, "late-auditor", clock=clock)  # never saw the victim registered
    assert await auditor.scan() == 0, "the delay starts when the auditor first sees the gap"
    clock.advance(CONFIG.lost_bookie_recovery_delay_s + 0.1)
    await auditor.tick()
    assert await UnderReplication(client.context.store).list() == [h.ledger_id]


async def test_auditor_election_hands_over_when_the_auditor_goes(rcluster):
    await rcluster.start_bookies(3, zones=ZONES)
    c1, c2 = await rcluster.client(), await rcluster.client()
    cfg = AutoRecoveryConfig(lost_bookie_recovery_delay_s=0.2)
    a1, a2 = Auditor(c1, cfg, "one"), Auditor(c2, cfg, "two")
    t1 = asyncio.ensure_future(a1.run_forever())
    await wait_until_async(lambda: a1.is_auditor, 10, "a1 to become the auditor")
    t2 = asyncio.ensure_future(a2.run_forever())
    await asyncio.sleep(0)
    assert not a2.is_auditor
    t1.cancel()
    await asyncio.gather(t1, return_exceptions=True)
    await a1.resign()
    await wait_until_async(lambda: a2.is_auditor, 10, "a2 to become the auditor")
    t2.cancel()
    await asyncio.gather(t2, return_exceptions=True)


async def test_idle_writer_replaces_a_bookie_that_leaves_without_waiting_for_an_add(rcluster):
    await rcluster.start_bookies(4, zones=ZONES)
    client = await rcluster.client(ClientConfig(add_entry_timeout_s=2.0))
    writer = await write_ledger(client, 10, close=False)
    victim = writer.ensemble[0]
    await rcluster.stop_bookie(victim)
    await wait_until_async(lambda: victim not in writer.ensemble, 10, "the writer to replace the bookie that left")
    md, _ = await client.get_metadata(writer.ledger_id)
    assert md.state is LedgerState.OPEN and victim not in md.current_ensemble
    assert md.ensembles[-1][0] == 10, "the new fragment starts after the last acknowledged entry"
    assert await writer.add_entry(payload(writer.ledger_id, 10)) == 10
