"""GC removes ledgers deleted from metadata (after two passes) and shrinks the data dir; survivors intact."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from storage import digest
from storage.bookie.bookie import Bookie
from storage.bookie.config import load_config
from storage.bookie.gc import GarbageCollector, collectable
from storage.errors import MetadataConnectionError
from storage.ledger_metadata import LedgerMetadata, master_key
from storage.metadata import open_store, paths

KEY = master_key(b"")


@pytest.mark.parametrize(
    "now, last, expected",
    [({1, 2}, set(), set()), ({1, 2}, {2, 3}, {2}), (set(), {1}, set()), ({5}, {5}, {5})],
)
def test_two_pass_rule(now, last, expected):
    assert collectable(now, last) == expected


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


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
