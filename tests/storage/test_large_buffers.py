"""storage.large_buffers: a 5 MiB buffer freed and allocated again reuses the process's pages instead of faulting in
fresh ones from a new mmap (the cost a 5 MiB message paid on every copy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_CHILD = textwrap.dedent(
    """
    import resource, sys
    if sys.argv[1] == "tuned":
        from storage.large_buffers import keep_large_buffers
        assert keep_large_buffers()
    src = b"x" * (5 * 1024 * 1024)
    bytes(bytearray(src))  # the first copy faults its pages in either way
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        bytes(bytearray(src))
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _page_faults(mode: str) -> int:
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=repo, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(repo)}, check=True)
    return int(out.stdout.strip())


def test_large_buffers_are_reused_instead_of_faulted_in_afresh():
    pages_per_copy = 5 * 1024 * 1024 // os.sysconf("SC_PAGE_SIZE")
    untuned, tuned = _page_faults("default"), _page_faults("tuned")
    assert untuned > 40 * pages_per_copy  # 80 fresh 5 MiB buffers: every page of each faulted in
    assert tuned < untuned / 10
