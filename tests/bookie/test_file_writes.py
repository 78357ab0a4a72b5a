"""Writing a journal group or an entry log's bytes (storage/bookie/file_writes.py): pieces in order through short
writes, small runs joined, and large writes sent to the device in bounded steps."""

from __future__ import annotations

import os

import pytest

from storage.bookie.file_writes import REMOVING_SUFFIX, gather, remove_in_steps, remove_leftovers, write_all, write_in_steps


class _ShortWrites:
    """A writev that takes at most ``limit`` bytes per call, as a filling disk does."""

    def __init__(self, limit: int):
        self.limit, self.out, self.writev_calls = limit, bytearray(), []

    def writev(self, fd, chunks):
        self.writev_calls.append(len(chunks))
        taken = b"".join(chunks)[: self.limit]
        self.out += taken
        return len(taken)


@pytest.mark.parametrize("chunk_count, limit", [(1, 10**9), (3, 10**9), (3, 5), (2500, 10**9), (2500, 700)])
def test_write_all_writes_every_chunk_in_order_through_short_writes(chunk_count, limit):
    chunks = [b"%06d|" % i * (i % 7 + 1) for i in range(chunk_count)]
    fake = _ShortWrites(limit)
    assert write_all(-1, chunks, writev=fake.writev) == len(b"".join(chunks))
    assert bytes(fake.out) == b"".join(chunks)
    assert all(n <= 1024 for n in fake.writev_calls)  # never more iovecs than the kernel takes


def test_write_all_writes_a_real_file(tmp_path):
    chunks = [os.urandom(n) for n in (1, 65536, 0, 17)] * 600  # 2,400 buffers: three writev calls
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        assert write_all(fd, chunks) == sum(map(len, chunks))
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"".join(chunks)


@pytest.mark.parametrize("sizes, step, expected_steps", [
    ([10], 4, [4, 4, 2]),
    ([3, 3, 3], 4, [4, 4, 1]),  # a step spans pieces
    ([4, 4], 4, [4, 4]),
    ([1, 0, 2], 100, [3]),  # fewer bytes than a step: one write-back, at the end
])
def test_write_in_steps_writes_back_each_step_before_the_next(tmp_path, sizes, step, expected_steps):
    pieces = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    backs: list[int] = []  # the file's size at each write-back
    try:
        assert write_in_steps(fd, pieces, step, lambda f: backs.append(os.fstat(f).st_size)) == sum(sizes)
    finally:
        os.close(fd)
    assert [b - a for a, b in zip([0, *backs], backs)] == expected_steps
    assert (tmp_path / "f").read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("sizes, expected", [
    ([10, 20, 30], [60]),                              # small pieces: one write of them joined
    ([10, 100_000, 20, 30], [10, 100_000, 50]),       # a large piece stays itself, the runs around it join
    ([100_000, 200_000], [100_000, 200_000]),
    ([], []),
])
def test_gather_joins_runs_of_small_pieces_only(sizes, expected):
    pieces = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    out = gather(pieces)
    assert [len(p) for p in out] == expected
    assert b"".join(out) == b"".join(pieces)
    assert all(any(o is p for p in pieces) for o in out if len(o) >= 64 * 1024)


@pytest.mark.parametrize("per_call", [1, 7, 1000, 10**9])
def test_write_all_finishes_after_short_writes(per_call):
    written = bytearray()

    def writev(fd, views):  # writes at most per_call bytes a call, like a disk that takes a little at a time
        budget = per_call
        for v in views:
            take = bytes(v[:budget])
            written.extend(take)
            budget -= len(take)
            if not budget:
                break
        return per_call - budget

    pieces = [b"a" * 5, b"", b"b" * 3000, b"c" * 10]
    assert write_all(3, pieces, writev) == 3015
    assert bytes(written) == b"".join(pieces)


# ---- removing a file in synced steps --------------------------------------------------------------------------


def _file(path, size: int):
    path.write_bytes(os.urandom(size))
    return path


def test_remove_in_steps_shrinks_the_file_a_step_at_a_time_each_step_synced_then_deletes_it(tmp_path):
    path = _file(tmp_path / "journal-1.log", 10 * 1000 + 123)
    sizes_at_sync = []
    synced_dirs = []

    def sync(fd):
        sizes_at_sync.append(os.fstat(fd).st_size)

    assert remove_in_steps(path, 1000, sync=sync, sync_dir=synced_dirs.append) is True
    assert sizes_at_sync == [10 * 1000 + 123 - 1000 * k for k in range(1, 11)]  # the last piece goes with the unlink
    assert synced_dirs == [str(tmp_path)]  # the rename aside is made durable before any byte is given up
    assert os.listdir(tmp_path) == []


def test_remove_in_steps_of_a_missing_file_says_so(tmp_path):
    assert remove_in_steps(tmp_path / "nothing", 1000) is False


def test_a_crash_part_way_leaves_only_a_set_aside_name_which_the_next_start_deletes(tmp_path):
    path = _file(tmp_path / "journal-7.log", 5000)
    keep = _file(tmp_path / "journal-8.log", 100)
    calls = []

    def crashing_sync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(5, "simulated crash mid-removal")

    with pytest.raises(OSError):
        remove_in_steps(path, 1000, sync=crashing_sync)
    assert sorted(os.listdir(tmp_path)) == ["journal-7.log" + REMOVING_SUFFIX, "journal-8.log"]
    assert os.path.getsize(tmp_path / ("journal-7.log" + REMOVING_SUFFIX)) == 3000  # shortened, under another name
    assert remove_leftovers(tmp_path) == ["journal-7.log" + REMOVING_SUFFIX]
    assert os.listdir(tmp_path) == ["journal-8.log"] and keep.read_bytes()
