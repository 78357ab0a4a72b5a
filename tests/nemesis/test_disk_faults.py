"""Disk faults against real bookie processes: each fault really happens, and the ledger store copes.

* slow disk: every journal fsync of the bookie gets slower (its adds' latency shows it), and heals;
* full disk: a real ENOSPC from the bookie's own tmpfs turns it read-only, writers replace it in the
  ensemble and lose nothing; healing makes it writable again; without a mount, the fallback says so;
* bit flip: a flipped bit in an entry log is caught by the digest, reported as a bad replica, and the
  entry is read from another replica.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from pathlib import Path

import pytest

from loadtest.nemesis.disk_faults import DISK_FAULTS, BitFlip, FullDisk, SlowDisk
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.testing import disk
from storage.testing.processes import http_status
from storage.testing.waiting import wait_until_async
from tests.nemesis.fault_fixtures import fault_cluster  # noqa: F401  (fixture)

FAST = ClientConfig(add_entry_timeout_s=5.0, read_timeout_s=5.0, connect_timeout_s=2.0)


def payload(i: int) -> bytes:
    return f"entry-{i:06d}|".encode() + bytes(i % 251 for _ in range(200))


async def client_for(cluster, writable: int | None = None) -> LedgerClient:
    client = await LedgerClient.open(cluster.metadata_url, FAST)
    wanted = len(cluster.bookies.bookies) if writable is None else writable
    await client.registry.wait_for(lambda r: len(r.writable()) >= wanted, 15)
    return client


async def read_back(cluster, ledger_id: int, first: int | None = None, writable: int | None = None
                    ) -> tuple[list[bytes], LedgerClient]:
    client = await client_for(cluster, writable)
    reader = await client.open_ledger(ledger_id, recovery=False)
    entries = await reader.read_entries(first or 0, reader.last_add_confirmed if first is None else first)
    await reader.close()
    return [e.payload for e in entries], client


def test_disk_faults_are_registered_by_kind():
    assert [f.kind for f in DISK_FAULTS] == ["slow-disk", "full-disk", "bit-flip"]
    assert all(f.bookie_faults == 1 for f in DISK_FAULTS)


async def test_slow_disk_delays_every_journal_fsync_and_heals(fault_cluster):
    cluster = fault_cluster(bookies=1, proxy=False)
    bookie = cluster.bookies.bookies[0]
    client = await client_for(cluster)
    handle = await client.create_ledger(1, 1, 1)

    async def add_latency_s(n: int) -> float:
        started = time.perf_counter()
        for i in range(n):
            await handle.add_entry(payload(i))
        return (time.perf_counter() - started) / n

    fast = await add_latency_s(5)
    fault = SlowDisk(delay_ms=400)
    injected = await asyncio.to_thread(fault.inject, cluster, random.Random(1))
    assert injected.target == bookie.name and "+400 ms" in injected.detail
    assert id(bookie) in cluster.busy  # no other fault takes it while this one holds it
    assert (await asyncio.to_thread(bookie.set_journal_faults, 400))["fsyncDelayMs"] == 400
    slow = await add_latency_s(3)
    assert slow >= 0.4 > fast, (slow, fast)  # each add waits for its own delayed fsync
    await asyncio.to_thread(fault.heal, cluster)
    healed = await add_latency_s(5)
    assert healed < 0.4, healed
    assert not cluster.busy
    await handle.close()
    await client.close()


async def test_fault_switches_do_not_exist_outside_fault_injection_mode(fault_cluster):
    cluster = fault_cluster(bookies=1, proxy=False, fault_injection=False)
    bookie = cluster.bookies.bookies[0]
    assert http_status(f"http://127.0.0.1:{bookie.http_port}/api/v1/bookie/faults") == 404
    assert not SlowDisk().applicable(cluster)


async def test_fault_switches_refuse_out_of_bounds_values(fault_cluster):
    bookie = fault_cluster(bookies=1, proxy=False).bookies.bookies[0]
    for bad in ({"fsyncDelayMs": 10 ** 9}, {"fsyncDelayMs": -1}, {"fsyncDelayMs": "x"}, {"fsyncError": "ENOPE"}):
        req = urllib.request.Request(f"http://127.0.0.1:{bookie.http_port}/api/v1/bookie/faults", method="PUT",
                                     data=__import__("json").dumps(bad).encode())
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 400, bad


async def _full_disk_keeps_every_entry(cluster, expect_fallback: bool) -> None:
    client = await client_for(cluster)
    handle = await client.create_ledger(3, 3, 2)
    for i in range(20):
        await handle.add_entry(payload(i))
    victim = cluster.bookies.by_id(handle.ensemble[0])
    fault = FullDisk(bookie=victim)  # a bookie of this ledger's ensemble
    injected = await asyncio.to_thread(fault.inject, cluster, random.Random(3))
    assert injected.target == victim.name
    assert ("FALLBACK" in injected.detail) == expect_fallback, injected.detail
    assert ("needs root" in injected.detail) == expect_fallback, injected.detail
    if not expect_fallback:
        with pytest.raises(OSError) as full:  # the kernel's own ENOSPC: the filesystem really is full
            Path(victim.data_dir, "probe").write_bytes(b"x" * 65536)
        assert full.value.errno == 28
    for i in range(20, 60):
        await handle.add_entry(payload(i))  # the full bookie fails its adds; the writer replaces it
    md, _ = await client.get_metadata(handle.ledger_id)
    assert victim.bookie_id not in md.current_ensemble, md.ensembles
    state = await asyncio.to_thread(victim.info)
    assert state["state"] == "readonly", state
    await handle.close()
    entries, reader = await read_back(cluster, handle.ledger_id, writable=len(cluster.bookies.bookies) - 1)
    assert entries == [payload(i) for i in range(60)]
    await reader.close()
    await asyncio.to_thread(fault.heal, cluster)
    assert (await asyncio.to_thread(victim.info))["state"] == "writable"
    if not expect_fallback:
        assert not (Path(victim.data_dir) / disk.FILLER_NAME).exists()
    # Writable for real: a ledger on every bookie, the healed one included, takes adds.
    await client.registry.wait_for(lambda r: victim.bookie_id in {b.bookie_id for b in r.writable()}, 30)
    again = await client.create_ledger(4, 4, 4)
    await again.add_entry(b"after heal")
    await again.close()
    await client.close()


async def test_full_disk_is_a_real_enospc_that_turns_the_bookie_read_only(fault_cluster):
    # Mounting needs root, which developers' machines and CI have here (the fallback has its own test below).
    cluster = fault_cluster(bookies=4, proxy=False, disk_limit_bytes=64 * 2 ** 20)
    assert all(disk.is_mount_point(Path(b.data_dir)) for b in cluster.bookies.bookies), \
        [b.disk_refused for b in cluster.bookies.bookies]
    await _full_disk_keeps_every_entry(cluster, expect_fallback=False)


def test_every_tmpfs_under_a_root_is_unmounted(tmp_path):
    for name in ("a", "b/c"):
        disk.mount_tmpfs(tmp_path / name, 2 ** 20)
    assert sorted(disk.unmount_all_under(tmp_path)) == [str(tmp_path / "a"), str(tmp_path / "b/c")]
    assert not disk.is_mount_point(tmp_path / "a") and not disk.is_mount_point(tmp_path / "b/c")


async def test_full_disk_falls_back_to_an_injected_enospc_without_a_mount(fault_cluster, monkeypatch):
    def refused(path, size_bytes):
        raise disk.MountRefused(1, "mounting a tmpfs needs root")  # what a developer without root gets

    monkeypatch.setattr(disk, "mount_tmpfs", refused)
    cluster = fault_cluster(bookies=4, proxy=False, disk_limit_bytes=64 * 2 ** 20)
    assert all(not b.disk_mounted and "needs root" in b.disk_refused for b in cluster.bookies.bookies)
    await _full_disk_keeps_every_entry(cluster, expect_fallback=True)


async def test_bit_flip_is_caught_by_the_digest_and_read_from_another_replica(fault_cluster):
    cluster = fault_cluster(bookies=3, proxy=False)
    client = await client_for(cluster)
    handle = await client.create_ledger(3, 3, 3)
    for i in range(30):
        await handle.add_entry(payload(i))
    await handle.close()
    entry_id = 7
    # Entry 7 of an E3/Qw3 ledger is read from ensemble[7 % 3] first: flip it there.
    victim = cluster.bookies.by_id(handle.ensemble[entry_id % 3])
    ledgers = Path(victim.data_dir) / "ledgers"
    await wait_until_async(lambda: any(r["ledger_id"] == handle.ledger_id and r["entry_id"] == entry_id
                                       for r in disk.entry_log_records(ledgers)), 20, "the entry to reach an entry log")
    # Restart so the bookie's caches are empty and the read goes to the file.
    await asyncio.to_thread(victim.restart)
    fault = BitFlip(bookie=victim, ledger_id=handle.ledger_id, entry_id=entry_id)
    injected = await asyncio.to_thread(fault.inject, cluster, random.Random(5))
    assert f"ledger {handle.ledger_id} entry {entry_id}:" in injected.detail
    path, offset, bit, flipped = fault.flipped
    assert flipped == disk.read_byte(path, offset)

    got, reader = await read_back(cluster, handle.ledger_id, first=entry_id)
    assert got == [payload(entry_id)]  # the good copy, from another replica
    bad = [(b.ledger_id, b.entry_id, b.bookie_id) for b in reader.stats.bad_replicas]
    assert (handle.ledger_id, entry_id, victim.bookie_id) in bad, reader.stats.bad_replicas
    await reader.close()

    await asyncio.to_thread(fault.heal, cluster)
    assert disk.read_byte(path, offset) == flipped ^ (1 << bit)
    await client.close()
