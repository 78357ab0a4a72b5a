"""Tier 2: the bookie's background writers (the large journal lane, the storage thread) run nicer than the threads
that acknowledge small adds; the kernel's own per-thread nice values are read back from /proc."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from storage.bookie.bookie import Bookie
from storage.bookie.config import BookieConfig
from storage.bookie.thread_priority import lower_this_thread
from tests.bookie.test_bookie_core import KEY, entry, make_config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread only on Linux")

LARGE = 300 * 1024  # over the default large-record threshold (256 KiB)


def thread_nices() -> dict[int, int]:
    """Every thread of this process: its id -> nice, as the kernel reports it (/proc/self/task/*/stat field 19)."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = int(fields[16])
    return out


def test_the_calling_thread_alone_becomes_nicer():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    got = {}

    def worker():
        got["tid"] = threading.get_native_id()
        got["nice"] = lower_this_thread(5)
        got["kernel"] = thread_nices()[got["tid"]]

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got["nice"] == got["kernel"] == min(19, base + 5)
    assert thread_nices()[threading.get_native_id()] == base  # this thread, and so the process, untouched


def test_zero_steps_change_nothing():
    base = thread_nices()[threading.get_native_id()]
    assert lower_this_thread(0) is None
    assert thread_nices()[threading.get_native_id()] == base


async def test_the_large_lane_and_the_storage_thread_run_nicer_than_the_loop_and_the_main_lane(tmp_path):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    b = await Bookie.open(make_config(tmp_path))
    try:
        await b.add_entry(1, 0, entry(1, 0, 100), KEY, False)  # main lane
        await b.add_entry(1, 1, entry(1, 1, LARGE), KEY, False)  # large lane
        lanes = b._journal
        expected = min(19, base + b.config.background_write_nice)
        assert lanes.large.writer_nice == expected
        assert lanes.main.writer_nice is None
        assert b.storage_thread_nice == expected
        nices = thread_nices()
        assert nices[threading.get_native_id()] == base  # the event loop's thread
        assert sum(1 for n in nices.values() if n == expected) >= 2  # the kernel agrees: large lane, storage thread
    finally:
        await b.close()


async def test_background_write_nice_zero_keeps_every_thread_at_the_process_priority(tmp_path):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    b = await Bookie.open(make_config(tmp_path, background_write_nice=0))
    try:
        await b.add_entry(1, 0, entry(1, 0, LARGE), KEY, False)
        assert b._journal.large.writer_nice is None and b.storage_thread_nice is None
        assert set(thread_nices().values()) == {base}
    finally:
        await b.close()


@pytest.mark.parametrize("value", [-1, 20])
def test_background_write_nice_out_of_range_is_refused_by_name(tmp_path, value):
    with pytest.raises(ValueError, match="background_write_nice"):
        make_config(tmp_path, background_write_nice=value).validate()
