"""The journal's large-record lane: small adds never wait behind a large add's write and fsync, and keys, fences
and replay keep their guarantees across the two lanes (storage/bookie/journal_lanes.py)."""

from __future__ import annotations

import asyncio
import os
import textwrap
import threading
from pathlib import Path

import pytest

from storage import digest
from storage.bookie import file_writes
from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.bookie.journal import ADD, FENCE, MASTER_KEY, JournalRecord, list_journal_files
from storage.bookie.journal_lanes import LARGE_LANE_DIR, all_of, lane_for
from storage.errors import BookieInternalError
from storage.testing.waiting import wait_until_async
from tests.bookie.support import kill_9_after_acks

DEADLINE_S = 10.0
KEY = b"master-key"
NEVER_MS = 3_600_000
LARGE = 300 * 1024


def make_config(tmp_path: Path, **changes) -> BookieConfig:
    changes.setdefault("flush_interval_ms", NEVER_MS)
    return BookieConfig(metadata_store_url="mem://", data_dir=tmp_path, **changes)


def entry(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    pattern = b"%d:%d|" % (ledger_id, entry_id)
    return digest.package(ledger_id, entry_id, entry_id - 1, 0, (pattern * (size // len(pattern) + 1))[:size])


class HeldSync:
    """An fdatasync hook that holds the syncs ``which(fd, grown_bytes)`` picks until the test releases them."""

    def __init__(self, which):
        self.which = which
        self.entered = threading.Event()
        self.released = threading.Event()
        self.armed = False
        self._synced: dict[int, int] = {}  # fd -> its size at its last sync

    def __call__(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        grown = size - self._synced.get(fd, 0)
        if self.armed and self.which(fd, grown):
            self.entered.set()
            if not self.released.wait(DEADLINE_S):
                raise OSError("the test never released the held fsync")
        os.fdatasync(fd)
        self._synced[fd] = size

    async def wait_entered(self, what: str) -> None:
        if not await asyncio.to_thread(self.entered.wait, DEADLINE_S):
            raise TimeoutError(f"timed out waiting for {what}")


def in_large_lane(fd: int) -> bool:
    return f"/{LARGE_LANE_DIR}/" in os.readlink(f"/proc/self/fd/{fd}")


# ---- pure ----------------------------------------------------------------------


@pytest.mark.parametrize("record, threshold, lane", [
    (JournalRecord(ADD, 1, 0, b"x" * 100), 256 * 1024, "main"),
    (JournalRecord(ADD, 1, 0, b"x" * (256 * 1024 - 1)), 256 * 1024, "main"),
    (JournalRecord(ADD, 1, 0, b"x" * (256 * 1024)), 256 * 1024, "large"),
    (JournalRecord(ADD, 1, 0, b"x" * LARGE), 0, "main"),  # 0: one lane
    (JournalRecord(MASTER_KEY, 1, -1, b"k" * LARGE), 256 * 1024, "main"),  # keys and fences never move
    (JournalRecord(FENCE, 1), 1, "main"),
])
def test_lane_for(record, threshold, lane):
    assert lane_for(record, threshold) == lane


@pytest.mark.parametrize("key", ["journal_large_record_bytes", "write_back_step_bytes"])
def test_a_negative_large_record_threshold_or_write_back_step_is_refused(tmp_path, key):
    with pytest.raises(ValueError, match=key):
        make_config(tmp_path, **{key: -1}).validate()


async def test_all_of_takes_the_primary_outcome_and_optionally_the_others_failure():
    loop = asyncio.get_running_loop()
    primary, other = loop.create_future(), loop.create_future()
    strict, lenient = all_of(loop, primary, [other], others_must_succeed=True), \
        all_of(loop, primary, [other], others_must_succeed=False)
    primary.set_result(None)
    await asyncio.sleep(0)
    assert not strict.done() and not lenient.done()  # the other is still pending
    other.set_exception(BookieInternalError("key record failed"))
    await asyncio.wait_for(asyncio.wait([strict, lenient]), DEADLINE_S)
    with pytest.raises(BookieInternalError, match="key record failed"):
        strict.result()
    assert lenient.result() is None


# ---- the bookie with two lanes -------------------------------------------------


async def test_a_small_add_is_acknowledged_while_a_large_adds_fsync_is_held(tmp_path):
    # Hold whichever fsync makes the large record durable; with one journal writer the small add queued behind
    # it waits for all of it.
    hold = HeldSync(lambda fd, grown: grown >= LARGE)
    b = await Bookie.open(make_config(tmp_path), fsync=hold)
    try:
        await b.add_entry(2, 0, entry(2, 0), KEY, False)  # ledger 2's key is durable before the test
        hold.armed = True
        large = asyncio.ensure_future(b.add_entry(1, 0, entry(1, 0, LARGE), KEY, False))
        await hold.wait_entered("the large add's fsync")
        await asyncio.wait_for(b.add_entry(2, 1, entry(2, 1), KEY, False), DEADLINE_S / 2)
        assert await b.read_entry(2, 1) == entry(2, 1)
        assert not large.done()  # still held: the small add did not wait for it
        hold.released.set()
        await asyncio.wait_for(large, DEADLINE_S)
        assert await b.read_entry(1, 0) == entry(1, 0, LARGE)
    finally:
        hold.released.set()
        await b.close()


async def test_a_fence_completes_only_after_its_ledgers_large_adds_queued_before_it(tmp_path):
    hold = HeldSync(lambda fd, grown: in_large_lane(fd))
    b = await Bookie.open(make_config(tmp_path), fsync=hold)
    try:
        await b.add_entry(1, 0, entry(1, 0), KEY, False)
        await b.add_entry(3, 0, entry(3, 0), KEY, False)
        hold.armed = True
        large = asyncio.ensure_future(b.add_entry(1, 1, entry(1, 1, LARGE), KEY, False))
        await hold.wait_entered("the large lane's fsync")
        fence = asyncio.ensure_future(b.fence(1, KEY))
        other_fence = asyncio.ensure_future(b.fence(3, KEY))
        # The main lane is not held: ledger 3's fence (no large add) completes, ledger 1's waits for entry 1.
        await asyncio.wait_for(other_fence, DEADLINE_S)
        await asyncio.wait_for(b.add_entry(4, 0, entry(4, 0), KEY, False), DEADLINE_S)
        assert not fence.done()
        seen = {}
        fence.add_done_callback(lambda _f: seen.setdefault("lac", b.read_lac(1)))
        hold.released.set()
        await asyncio.wait_for(asyncio.gather(large, fence), DEADLINE_S)
        assert seen == {"lac": 0}  # entry 1 (carrying LAC 0) was applied when the fence completed
    finally:
        hold.released.set()
        await b.close()


async def test_a_large_first_add_waits_for_its_ledgers_master_key(tmp_path):
    hold = HeldSync(lambda fd, grown: not in_large_lane(fd))
    b = await Bookie.open(make_config(tmp_path), fsync=hold)
    try:
        before = b._journal.large.synced_position
        hold.armed = True
        large = asyncio.ensure_future(b.add_entry(5, 0, entry(5, 0, LARGE), KEY, False))
        await hold.wait_entered("the main lane's fsync (the MASTER_KEY record)")
        await wait_until_async(lambda: b._journal.large.synced_position != before, DEADLINE_S,
                               "the large ADD made durable in its own lane")
        assert not large.done()  # its ledger's key is not durable yet
        hold.released.set()
        await asyncio.wait_for(large, DEADLINE_S)
    finally:
        hold.released.set()
        await b.close()


async def test_one_lane_when_the_threshold_is_zero(tmp_path):
    config = make_config(tmp_path, journal_large_record_bytes=0)
    b = await Bookie.open(config)
    await b.add_entry(1, 0, entry(1, 0, LARGE), KEY, False)
    large_dir = config.journal_dir / LARGE_LANE_DIR
    assert all((large_dir / f"journal-{i}.log").stat().st_size == 0 for i in list_journal_files(large_dir))
    await b.close()


@pytest.mark.parametrize("sync_data", [True, False])
async def test_the_large_lane_reaches_the_device_in_steps_and_the_main_lane_in_one_go(tmp_path, monkeypatch,
                                                                                       sync_data):
    step = 256 * 1024
    backs: dict[str, list[int]] = {}  # lane directory -> bytes written since its previous write-back, at each one

    def write_back(fd: int) -> None:
        lane = os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
        sizes = backs.setdefault(lane, [])
        sizes.append(os.fstat(fd).st_size - sum(sizes))

    monkeypatch.setattr(file_writes, "write_back", write_back)
    config = make_config(tmp_path, write_back_step_bytes=step, journal_sync_data=sync_data)
    b = await Bookie.open(config)
    try:
        await b.add_entry(1, 0, entry(1, 0, 100), KEY, False)
        await b.add_entry(1, 1, entry(1, 1, 5 * 1024 * 1024), KEY, False)
        assert await b.read_entry(1, 1) == entry(1, 1, 5 * 1024 * 1024)
    finally:
        await b.close()
    assert config.journal_dir.name not in backs  # the main lane's small records: one write, then fdatasync
    if not sync_data:  # no fdatasync on either lane, so none to shorten: the large lane writes in one go too
        assert LARGE_LANE_DIR not in backs
        return
    large = backs[LARGE_LANE_DIR]
    assert max(large) <= step and sum(large) > 5 * 1024 * 1024  # one 5 MiB record, 21 steps


async def test_a_clean_restart_replays_nothing_and_checkpoints_trim_both_lanes(tmp_path):
    config = make_config(tmp_path, journal_max_file_size_bytes=LARGE * 2)
    b = await Bookie.open(config)
    for e in range(8):
        await b.add_entry(1, e, entry(1, e, LARGE if e % 2 else 100), KEY, False)
    await b.checkpoint()
    large_dir = config.journal_dir / LARGE_LANE_DIR
    assert len(list_journal_files(large_dir)) == 1  # the rolled files before the mark are gone
    await b.close()
    b = await Bookie.open(config)
    assert b.replayed_records == 0
    assert [await b.read_entry(1, e) for e in range(8)] == [entry(1, e, LARGE if e % 2 else 100) for e in range(8)]
    await b.close()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from storage import digest
    from storage.bookie.bookie import Bookie
    from storage.bookie.config import BookieConfig

    def body(ledger, e):
        size = 300 * 1024 if e % 3 == 0 else 200
        return digest.package(ledger, e, e - 1, 0, bytes([e % 251]) * size)

    async def main():
        config = BookieConfig(metadata_store_url="mem://", data_dir=sys.argv[1], flush_interval_ms=50,
                              write_cache_max_bytes=4 * 1024 * 1024)
        b = await Bookie.open(config)
        await b.add_entry(2, 0, body(2, 0), b"k2", False)  # ledger 2's first add is large: its key in the other lane
        await b.fence(2, b"k2")
        print("fenced", flush=True)
        entry_id = 0
        while True:
            batch = range(entry_id, entry_id + 6)
            await asyncio.gather(*(b.add_entry(1, e, body(1, e), b"k", False) for e in batch))
            print("acked", batch[-1], flush=True)
            entry_id += 6

    asyncio.run(main())
    """
)


async def test_kill_9_loses_no_acknowledged_entry_of_either_lane(tmp_path):
    data_dir = tmp_path / "bookie"
    # several checkpoints and write-cache flushes happen before the kill
    acked = await kill_9_after_acks(_CHILD, data_dir, at_least=300, timeout_s=60)

    large_dir = data_dir / "journal" / LARGE_LANE_DIR
    assert any((large_dir / f"journal-{i}.log").stat().st_size for i in list_journal_files(large_dir))
    b = await Bookie.open(make_config(data_dir))
    try:
        assert b.is_fenced(2) and b.knows_key(2)
        assert await b.read_entry(2, 0) == digest.package(2, 0, -1, 0, bytes([0]) * (300 * 1024))
        for e in range(acked + 1):
            size = 300 * 1024 if e % 3 == 0 else 200
            assert await b.read_entry(1, e) == digest.package(1, e, e - 1, 0, bytes([e % 251]) * size)
    finally:
        await b.close()
