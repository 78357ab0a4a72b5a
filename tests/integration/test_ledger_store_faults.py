"""The ledger store under real faults: real ZooKeeper, real `bookie start` processes, kill -9, corrupted files.

Each test states the invariant it tries to break (DESIGN.md invariants 1, 3, 4, 7).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from storage import digest
from storage.autorecovery.underreplication import UnderReplication
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.errors import BookieUnavailableError, LedgerFencedError, PlacementPolicyError, StorageError
from storage.ledger_metadata import LedgerState
from storage.metadata import open_store
from storage.testing.waiting import wait_until_async

FAST = ClientConfig(add_entry_timeout_s=5.0, read_timeout_s=5.0, connect_timeout_s=2.0)


def payload(i: int, size: int = 256) -> bytes:
    head = f"entry-{i:06d}|".encode()
    return head + bytes((i + k) % 251 for k in range(size - len(head)))


async def client_for(cluster, **config) -> LedgerClient:
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(**{**FAST.__dict__, **config}))
    await client.registry.wait_for(lambda r: len(r.writable()) >= sum(b.alive for b in cluster.bookies), 15)
    return client


async def read_all(client: LedgerClient, ledger_id: int) -> list[bytes]:
    reader = await client.open_ledger(ledger_id, recovery=True)
    try:
        if reader.last_add_confirmed < 0:
            return []
        return [e.payload for e in await reader.read_entries(0, reader.last_add_confirmed)]
    finally:
        await reader.close()


async def test_kill9_bookie_mid_stream_keeps_every_acknowledged_entry(start_bookies):
    """Invariant 1: kill -9 one bookie of an E3/Qw2/Qa2 ledger while adds stream in."""
    cluster = start_bookies(4, zones=("zone-a", "zone-b", "zone-c", "zone-a"))
    client = await client_for(cluster)
    handle = await client.create_ledger(3, 2, 2)
    victim = cluster.by_id(handle.ensemble[1])
    acked: dict[int, bytes] = {}
    killed = asyncio.Event()

    async def produce(count: int) -> None:
        window = asyncio.Semaphore(64)
        pending = []
        for i in range(count):
            await window.acquire()
            fut = handle.add_entry_async(payload(i))
            fut.add_done_callback(lambda f, i=i: (window.release(), f.exception() is None and acked.__setitem__(f.result(), payload(i))))
            pending.append(fut)
            if i == 400:
                await asyncio.to_thread(victim.kill9)
                killed.set()
        await asyncio.gather(*pending)

    await produce(1500)
    assert killed.is_set()
    await handle.close()
    md, _ = await client.get_metadata(handle.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 1499
    assert len(md.ensembles) >= 2, "metadata must record the ensemble change"
    assert victim.bookie_id not in md.current_ensemble
    assert sorted(acked) == list(range(1500))

    reader_client = await client_for(cluster)
    assert await read_all(reader_client, handle.ledger_id) == [acked[i] for i in range(1500)]
    await reader_client.close()
    await client.close()


async def test_second_writer_fences_first_and_racing_recoverers_converge(start_bookies):
    """Invariants 3 and 4: recovery fences the writer; concurrent recoverers agree on one closed state."""
    cluster = start_bookies(3)
    writer_client = await client_for(cluster)
    writer = await writer_client.create_ledger(3, 2, 2)
    last_acked = -1
    for i in range(50):
        last_acked = await writer.add_entry(payload(i))

    recoverers = [await client_for(cluster) for _ in range(3)]
    handles = await asyncio.gather(*(c.open_ledger(writer.ledger_id, recovery=True) for c in recoverers))
    assert {h.last_add_confirmed for h in handles} == {last_acked}
    md, _ = await recoverers[0].get_metadata(writer.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == last_acked

    with pytest.raises(LedgerFencedError):
        await writer.add_entry(b"after the fence")
    # Nothing the fenced writer tried is readable: the ledger ends at the last acknowledged entry.
    assert await read_all(recoverers[1], writer.ledger_id) == [payload(i) for i in range(50)]
    for h in handles:
        await h.close()
    for c in (*recoverers, writer_client):
        await c.close()


def find_and_flip(ledger_dir: Path, needle: bytes) -> Path:
    """Flip one byte of ``needle`` inside whichever entry log holds it; return that file."""
    for log in sorted(ledger_dir.rglob("entrylog-*")):
        data = bytearray(log.read_bytes())
        at = data.find(needle)
        if at >= 0:
            data[at + len(needle) // 2] ^= 0xFF
            log.write_bytes(bytes(data))
            return log
    raise AssertionError(f"{needle!r} not found in any entry log under {ledger_dir}")


async def test_bit_rot_in_one_entry_log_is_reported_and_read_from_another_replica(start_bookies):
    cluster = start_bookies(3)
    client = await client_for(cluster)
    handle = await client.create_ledger(3, 3, 3)
    for i in range(3):
        await handle.add_entry(payload(i))
    await handle.close()
    victim = cluster.by_id(handle.ensemble[0])  # first replica of entry 0, so reads try it first
    assert victim.stop() == 0  # clean stop checkpoints the journal into the entry logs
    find_and_flip(Path(victim.data_dir) / "ledgers", payload(0)[:64])
    victim.start()

    reader_client = await client_for(cluster)
    reader = await reader_client.open_ledger(handle.ledger_id, recovery=False)
    entry = await reader.read_entry(0)
    assert entry.payload == payload(0)
    bad = [b for b in reader_client.stats.bad_replicas if b.entry_id == 0]
    assert [b.bookie_id for b in bad] == [victim.bookie_id], reader_client.stats.bad_replicas
    await reader.close()

    # Second half: the victim's scrubber finds the rot, a replication worker re-writes the bad copy
    # from a good one, and after a restart (entry logs only) every replica holds the right bytes.
    victim.env.update({"MAGNETAR_BOOKIE_LOCAL_SCRUB_PERIOD_S": "0.3",
                       "MAGNETAR_BOOKIE_LOCAL_SCRUB_RATE_LIMIT_ENTRIES_PER_S": "1000"})
    await asyncio.to_thread(victim.restart)
    pool = reader_client.context.pool

    async def every_replica_good() -> bool:
        for bookie in handle.ensemble:
            try:
                body = (await pool.read(bookie, handle.ledger_id, 0)).body
            except StorageError:
                return False
            if digest.verify(body, handle.ledger_id, 0).payload != payload(0):
                return False
        return not await UnderReplication(reader_client.context.store).list()

    await wait_until_async(every_replica_good, 30, "the scrubbed copy to be re-replicated", interval_s=0.05)
    assert victim.stop() == 0
    victim.start()
    await reader_client.registry.wait_for(lambda r: r.is_registered(victim.bookie_id), 15)

    async def victim_serves_good_copies() -> bool:
        try:
            bodies = [(await pool.read(victim.bookie_id, handle.ledger_id, i)).body for i in range(3)]
        except BookieUnavailableError:  # the connection from before the restart
            return False
        return [digest.verify(b, handle.ledger_id, i).payload for i, b in enumerate(bodies)] == [payload(i) for i in range(3)]

    await wait_until_async(victim_serves_good_copies, 15, "the restarted victim to serve good copies from its entry logs",
                           interval_s=0.05)
    await reader_client.close()
    await client.close()


async def test_journal_replay_restores_acknowledged_entries_after_kill9(start_bookies):
    """Ledger storage is never flushed (long flush interval); only the journal holds the entries."""
    cluster = start_bookies(3, env={"MAGNETAR_BOOKIE_FLUSH_INTERVAL_MS": "3600000"})
    client = await client_for(cluster)
    handle = await client.create_ledger(3, 3, 3)
    for i in range(300):
        handle.add_entry_async(payload(i, 1024))
    last = await handle.add_entry(payload(300, 1024))
    assert last == 300
    await client.close()  # no ledger close: the writer "crashes" with the ledger open

    for bookie in cluster.bookies:
        await asyncio.to_thread(bookie.kill9)
    entry_log_bytes = sum(f.stat().st_size for b in cluster.bookies for f in Path(b.data_dir, "ledgers").rglob("entrylog-*"))
    assert entry_log_bytes < 301 * 1024, "entries reached the entry logs; this test needs them only in the journal"
    for bookie in cluster.bookies:
        bookie.spawn()
    for bookie in cluster.bookies:
        bookie.wait_healthy()

    reader_client = await client_for(cluster)
    assert await read_all(reader_client, handle.ledger_id) == [payload(i, 1024) for i in range(301)]
    await reader_client.close()


def write_set_zones(client: LedgerClient, md) -> list[set[str]]:
    zones = []
    for e in range(md.ensemble_size):
        zones.append({client.registry.get(b).network_location for b in md.write_set(e)})
    return zones


async def test_placement_spans_zones_and_strict_mode_refuses_one_zone(start_bookies):
    cluster = start_bookies(6)  # two bookies in each of three zones, distinct upgrade domains
    client = await client_for(cluster)
    for _ in range(100):
        handle = await client.create_ledger(3, 2, 2)
        md = handle.metadata
        for bookies in (md.write_set(e) for e in range(md.ensemble_size)):
            locations = [client.registry.get(b).network_location for b in bookies]
            assert len({loc.split("/")[1] for loc in locations}) >= 2, (bookies, locations)
            assert len(set(locations)) == len(locations)
        await handle.close()
    await client.close()

    one_zone = start_bookies(3, zones=("zone-a",))
    strict = await client_for(one_zone, placement_mode="strict")
    with pytest.raises(PlacementPolicyError, match="zone"):
        await strict.create_ledger(3, 2, 2)
    await strict.close()
    soft = await client_for(one_zone, placement_mode="soft")
    handle = await soft.create_ledger(3, 2, 2)
    assert soft.stats.placement_warnings, "soft placement in one zone must warn"
    assert await handle.add_entry(b"placed anyway") == 0
    await handle.close()
    await soft.close()


async def test_read_only_bookie_takes_no_new_ledgers_and_writes_go_elsewhere(start_bookies):
    cluster = start_bookies(4, zones=("zone-a", "zone-b", "zone-c", "zone-a"))
    store = await open_store(cluster.metadata_url)
    full = cluster.bookies[3]
    full.stop()
    full.env.update({
        "MAGNETAR_BOOKIE_DISK_USAGE_THRESHOLD": "0.0001",
        "MAGNETAR_BOOKIE_DISK_USAGE_LWM_THRESHOLD": "0.00005",
        "MAGNETAR_BOOKIE_DISK_CHECK_INTERVAL_MS": "100",
    })
    full.start()
    deadline = asyncio.get_running_loop().time() + 20
    while await store.exists(f"/ledgers/available/readonly/{full.bookie_id}") is None:
        assert asyncio.get_running_loop().time() < deadline, "bookie over its disk threshold never went read-only"
        await asyncio.sleep(0.05)
    assert await store.exists(f"/ledgers/available/{full.bookie_id}") is None
    await store.close()

    client = await LedgerClient.open(cluster.metadata_url, FAST)
    await client.registry.wait_for(lambda r: len(r.writable()) == 3 and r.get(full.bookie_id) is not None, 15)
    for _ in range(10):
        handle = await client.create_ledger(3, 2, 2)
        assert full.bookie_id not in handle.ensemble
        assert await handle.add_entry(b"x") == 0
        await handle.close()
    await client.close()


def test_bookie_refuses_to_start_on_a_wiped_data_dir(start_bookies, tmp_path):
    cluster = start_bookies(3)
    bookie = cluster.bookies[0]
    bookie.stop()
    original = Path(bookie.data_dir)
    bookie.data_dir = tmp_path / "wrong-data-dir"
    proc = bookie.spawn()
    assert proc.wait(30) == 2
    log = bookie.log_tail()
    assert "cookie" in log.lower() and bookie.bookie_id in log, log
    bookie.data_dir = original
    bookie.start()  # the right dir still works
    assert bookie.alive and os.path.isdir(original)


async def test_bookie_paused_past_its_session_timeout_reregisters_and_serves(start_bookies):
    """SIGSTOP a bookie until ZooKeeper expires its session (its registration vanishes), then SIGCONT."""
    cluster = start_bookies(3, env={"MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": "2"})
    victim = cluster.bookies[0]
    store = await open_store(cluster.metadata_url)
    node = f"/ledgers/available/{victim.bookie_id}"
    old_owner = (await store.exists(node)).ephemeral_owner
    victim.pause()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while await store.exists(node) is not None:
            assert asyncio.get_running_loop().time() < deadline, "expired session kept its registration"
            await asyncio.sleep(0.1)
    finally:
        victim.resume()
    deadline = asyncio.get_running_loop().time() + 30
    while (stat := await store.exists(node)) is None:
        assert asyncio.get_running_loop().time() < deadline, f"bookie never re-registered:\n{victim.log_tail()}"
        await asyncio.sleep(0.1)
    assert stat.ephemeral_owner != old_owner
    await store.close()

    client = await client_for(cluster)
    handle = await client.create_ledger(3, 3, 3)  # needs the resumed bookie
    assert await handle.add_entry(b"after resume") == 0
    await handle.close()
    await client.close()
