"""Writing a list of byte pieces to a file in order, without joining large pieces first (the bookie journal), and
writing back what was written in bounded steps (the entry log, the journal's large lane)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Callable

# Pieces smaller than this are joined before a write (cheap, and fewer iovecs); larger ones are written in place.
_JOIN_BELOW = 64 * 1024
_IOV_MAX = 1024  # the most pieces one writev takes (Linux UIO_MAXIOV)


def gather(pieces: list[bytes], join_below: int = _JOIN_BELOW) -> list[bytes]:
    """Runs of small pieces joined, large pieces kept as they are, in order: what one writev takes."""
    out: list[bytes] = []
    run: list[bytes] = []
    for piece in pieces:
        if len(piece) < join_below:
            run.append(piece)
            continue
        if run:
            out.append(b"".join(run) if len(run) > 1 else run[0])
            run = []
        out.append(piece)
    if run:
        out.append(b"".join(run) if len(run) > 1 else run[0])
    return out


def write_all(fd: int, pieces: list[bytes], writev=os.writev) -> int:
    """Write every piece in order with writev (several calls if it writes less, or past IOV_MAX pieces)."""
    views = [memoryview(p) for p in pieces if len(p)]
    total = 0
    while views:
        n = writev(fd, views[:_IOV_MAX])
        total += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return total


def write_in_steps(fd: int, pieces: list[bytes], step_bytes: int, write_back: Callable[[int], None]) -> int:
    """``write_all`` in steps of at most ``step_bytes``, each written back to the device and waited for before the
    next: the device queue then never holds more than one step of these bytes, so a small journal's fdatasync on
    the same disk waits behind one step, not behind a whole 5 MiB record. Not a durability point: fsync still is."""
    total = 0
    step: list[memoryview] = []
    room = step_bytes
    for piece in pieces:
        view = memoryview(piece)
        while len(view):
            take = view[:room]
            step.append(take)
            view = view[len(take):]
            room -= len(take)
            if room == 0:
                total += write_all(fd, step)
                write_back(fd)
                step, room = [], step_bytes
    if step:
        total += write_all(fd, step)
        write_back(fd)
    return total


# sync_file_range(2) flags: wait for writeback already under way, start it for every dirty page, wait for it.
_SYNC_FILE_RANGE_WAIT_BEFORE, _SYNC_FILE_RANGE_WRITE, _SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4


def _load_sync_file_range() -> Callable[[int], None] | None:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux/glibc: the final fsync does all the writing
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]

    def write_back(fd: int) -> None:
        flags = _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE | _SYNC_FILE_RANGE_WAIT_AFTER
        if fn(fd, 0, 0, flags) != 0:  # offset 0, length 0: the whole file (its clean pages cost nothing)
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return write_back


# Writes a file's dirty pages to the device and waits for them; not a durability point (no metadata, no device
# cache flush): fsync still is. None where the call does not exist.
write_back: Callable[[int], None] | None = _load_sync_file_range()
