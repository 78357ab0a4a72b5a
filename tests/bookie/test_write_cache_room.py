"""Tier 2: a writer of large entries that outruns the flush waits for room alone; small adds keep the write cache's
last quarter (LedgerStorage.write_cache_has_room). The flush is held by the test, not raced."""

from __future__ import annotations

import asyncio
import threading

from storage.bookie.bookie import Bookie
from storage.bookie.ledger_storage import LedgerStorage
from storage.testing.waiting import wait_until_async
from tests.bookie.test_bookie_core import DEADLINE_S, KEY, entry, make_config

CACHE_BYTES = 4 * 1024 * 1024
LARGE_BYTES = 300 * 1024  # over the large-record threshold below
LARGE_THRESHOLD = 256 * 1024


def waits(bookie: Bookie, size: str) -> float:
    return bookie.metrics.write_cache_waits.labels(size)._value.get()


async def test_a_large_writer_waits_for_the_flush_while_small_adds_go_on(tmp_path):
    b = await Bookie.open(make_config(tmp_path, write_cache_max_bytes=CACHE_BYTES,
                                      journal_large_record_bytes=LARGE_THRESHOLD))
    release = threading.Event()
    real_flush = b._storage.flush

    def held_flush(snapshot):  # the storage thread: the checkpoint the large writer started stays in progress
        release.wait(DEADLINE_S)
        real_flush(snapshot)

    b._storage.flush = held_flush
    try:
        # Large adds, one after another: the first checkpoint starts once they pass three quarters of the
        # cache (and is held); the next ones fill the new cache to three quarters again, and one then waits.
        large = None
        for entry_id in range(2 * CACHE_BYTES // LARGE_BYTES + 2):
            large = asyncio.ensure_future(b.add_entry(1, entry_id, entry(1, entry_id, LARGE_BYTES), KEY, False))
            await wait_until_async(lambda: large.done() or waits(b, "large") > 0, DEADLINE_S,
                                   "the large add to be stored or to wait for room")
            if not large.done():
                break
            large.result()
        assert waits(b, "large") == 1 and not large.done()
        assert b._checkpoint_task is not None  # the flush it waits for is the held one
        assert b._storage.write_cache_bytes >= CACHE_BYTES * 3 // 4

        # A small add is stored now, while the flush is still held.
        for entry_id in range(3):
            await asyncio.wait_for(b.add_entry(2, entry_id, entry(2, entry_id), KEY, False), DEADLINE_S)
        assert waits(b, "small") == 0
        assert not large.done()
        assert await b.read_entry(2, 2) == entry(2, 2)

        release.set()
        await asyncio.wait_for(large, DEADLINE_S)  # the large writer goes on once the flush is done
    finally:
        release.set()
        b._storage.flush = real_flush
        await b.close()


def test_room_by_entry_size(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, write_cache_max_bytes=4000, journal_large_record_bytes=1000))
    cases = [  # (bytes already in the cache, entry size, room?)
        (0, 100, True), (0, 1000, True),
        (2999, 1000, True), (3000, 1000, False), (3000, 999, True),
        (3999, 100, True), (4000, 100, False), (4000, 5000, False),
    ]
    for ledger_id, (cached, size, room) in enumerate(cases, start=1):
        storage.put(ledger_id, 0, b"x" * cached, -1)  # the cache holds ``cached`` bytes
        assert storage.write_cache_has_room(size) is room, (cached, size)
        storage.end_flush(storage.begin_flush(), True)  # emptied (dropped unwritten: only the room is tested)
    storage.close()


def test_one_lane_means_no_size_classes(tmp_path):
    storage = LedgerStorage(make_config(tmp_path, write_cache_max_bytes=4000, journal_large_record_bytes=0))
    storage.put(1, 0, b"x" * 3500, -1)
    assert storage.write_cache_has_room(10_000)
    storage.close()
