"""GC removes ledgers deleted from metadata (after two passes) and shrinks the data dir; survivors intact."""

from __future__ import annotations

import uuid
import pytest
from prometheus_client import CollectorRegistry

from storage import digest
from storage.bookie.bookie import Bookie
from storage.bookie.config import load_config
from storage.bookie.gc import GarbageCollector, collectable
from storage.errors import MetadataConnectionError
from storage.ledger_metadata import LedgerMetadata, master_key
from storage import protocol as p
from storage.bookie.process import BookieService
from storage.errors import NoSuchLedgerError
from storage.metadata import open_store, paths
from tests.bookie.support import Conn, add, config_for, dir_bytes, make_ledger

KEY = master_key(b"")


@pytest.mark.parametrize(
    "now, last, expected",
    [({1, 2}, set(), set()), ({1, 2}, {2, 3}, {2}), (set(), {1}, set()), ({5}, {5}, {5})],
)
def test_two_pass_rule(now, last, expected):
    assert collectable(now, last) == expected


@pytest.fixture
async def setup(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    cfg = load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path),
                                 "entry_log_max_file_size_bytes": 256 * 1024, "compaction_threshold": 0.9}, environ={})
    bookie = await Bookie.open(cfg, registry=CollectorRegistry())
    yield store, cfg, bookie
    await bookie.close()
    await store.close()


async def fill(store, bookie, ledger_ids, entries=200, size=2048):
    for lid in ledger_ids:
        md = LedgerMetadata(lid, 1, 1, 1, b"", ((0, ("b",)),))
        await store.create(paths.ledger_path(lid), md.to_bytes(), make_parents=True)
    # interleave ledgers so every entry log holds some of each
    for e in range(entries):
        for lid in ledger_ids:
            await bookie.add_entry(lid, e, digest.package(lid, e, e - 1, 0, bytes([lid]) * size), KEY, False)
    await bookie.checkpoint()


async def test_deleted_ledgers_are_collected_and_space_reclaimed(setup):
    store, cfg, bookie = setup
    await fill(store, bookie, [1, 2, 3, 4])
    before = dir_bytes(cfg.ledger_dir)
    for lid in (1, 2, 3):
        await store.delete(paths.ledger_path(lid))
    gc = GarbageCollector(bookie, store, cfg)
    first = await gc.run_once()
    assert first.deleted_ledgers == [] and set(bookie.ledger_ids()) == {1, 2, 3, 4}  # absent once: kept
    second = await gc.run_once()
    assert second.deleted_ledgers == [1, 2, 3] and bookie.ledger_ids() == [4]
    assert second.reclaimed_bytes > 0
    after = dir_bytes(cfg.ledger_dir)
    assert after < before * 0.6, (before, after)
    for e in range(200):
        assert digest.verify(await bookie.read_entry(4, e), 4, e).payload == bytes([4]) * 2048


async def test_a_store_failure_skips_the_pass(setup):
    store, cfg, bookie = setup
    await fill(store, bookie, [7], entries=5)
    await store.delete(paths.ledger_path(7))

    class Broken:
        async def exists(self, path):
            raise MetadataConnectionError("store down")

    gc = GarbageCollector(bookie, Broken(), cfg)
    for _ in range(3):
        assert (await gc.run_once()).deleted_ledgers == []
    assert bookie.ledger_ids() == [7]


async def test_gc_through_a_running_bookie_shrinks_the_data_dir(tmp_path):
    """Entries written over the wire; metadata of three ledgers deleted; two GC passes; the dir shrinks."""
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    config = config_for(tmp_path, entry_log_max_file_size_bytes=256 * 1024, compaction_threshold=0.9,
                        journal_max_file_size_bytes=256 * 1024, gc_interval_ms=3_600_000)  # passes run by the test
    service = await BookieService.start(config, store=store)
    ledgers, entries, size = [1, 2, 3, 4], 150, 2048
    for lid in ledgers:
        await make_ledger(store, lid)
    conn = await Conn.open(service.port)
    for e in range(entries):  # interleaved, so every entry log holds some of each ledger
        conn.send(*(add(e * 10 + lid, lid, e, bytes([lid]) * size) for lid in ledgers))
        assert all(r.status == p.OK for r in await conn.recv(len(ledgers)))
    await service.bookie.checkpoint()  # entries leave the write cache for entry logs; old journal files go
    before = dir_bytes(config.data_dir)

    for lid in (1, 2, 3):
        await store.delete(paths.ledger_path(lid))
    assert (await service.gc.run_once()).deleted_ledgers == []  # absent once: could be a ledger being created
    result = await service.gc.run_once()
    assert result.deleted_ledgers == [1, 2, 3] and result.reclaimed_bytes > 0
    after = dir_bytes(config.data_dir)
    assert after < before * 0.6, (before, after)

    conn.send(*(p.ReadRequest(100_000 + e, 4, e) for e in range(entries)))
    survivors = {r.rid - 100_000: r for r in await conn.recv(entries)}
    assert all(digest.verify(survivors[e].body, 4, e).payload == bytes([4]) * size for e in range(entries))
    assert (await conn.request(p.ReadRequest(1, 1, 0))).status == NoSuchLedgerError.code
    await conn.close()
    await service.stop()
    await store.close()
