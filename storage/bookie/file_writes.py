"""Writing a list of byte pieces to a file in order, without joining large pieces first (the bookie journal)."""

from __future__ import annotations

import os

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

