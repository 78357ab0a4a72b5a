"""Disk faults for real-process tests and the nemesis: a size-limited filesystem, filling it, flipping a bit.

A *full disk* must be a real ENOSPC from the kernel, so a bookie that will be
filled gets its own tmpfs of a fixed size as its data dir (``mount_tmpfs``,
root only; without the privilege ``MountRefused`` says so and callers fall back
to an injected ENOSPC, see loadtest/nemesis/disk_faults.py). ``fill`` writes a
filler file until the kernel answers ENOSPC; removing it gives the space back.

A *bit flip* is done on a stored entry in an entry log: ``entry_log_records``
lists a ledger directory's records through the bookie's own ``bookie readlog``
command (the file format stays the bookie's business), ``flip_bit`` flips one
bit in place.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

FILLER_NAME = "nemesis-filler"
_CHUNK = 1024 * 1024


class MountRefused(OSError):
    """This process may not mount a filesystem (not root, or no mount(8))."""


def mount_tmpfs(path: Path, size_bytes: int) -> None:
    """Mount a tmpfs of ``size_bytes`` at ``path`` (created). Raises MountRefused when not allowed."""
    if size_bytes < 1024 * 1024:
        raise ValueError(f"a bookie's filesystem needs at least 1 MiB, got {size_bytes}")
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise MountRefused(errno.EPERM, "mounting a tmpfs needs root")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError as exc:
        raise MountRefused(errno.ENOENT, f"no mount command: {exc}") from exc
    if done.returncode != 0:
        raise MountRefused(errno.EPERM, f"mount refused: {done.stderr.strip()}")


def unmount(path: Path) -> None:
    """Unmount ``path`` (lazily, so a straggling reader does not keep it); its contents are gone."""
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def is_mount_point(path: Path) -> bool:
    return os.path.ismount(path)


def unmount_all_under(root: Path) -> list[str]:
    """Unmount every filesystem mounted at or below ``root`` (e.g. left by a bookie replaced meanwhile)."""
    prefix = os.path.realpath(root)
    try:
        with open("/proc/mounts") as fh:
            points = [line.split()[1].replace("\\040", " ") for line in fh]
    except OSError:
        return []
    mine = [p for p in points if p == prefix or p.startswith(prefix + os.sep)]
    for point in sorted(mine, key=len, reverse=True):
        unmount(Path(point))
    return mine


def fill(path: Path) -> int:
    """Write ``path/FILLER_NAME`` until the filesystem answers ENOSPC; returns the bytes written.

    Raises OSError if anything else fails, and RuntimeError if the filesystem never fills (it is not
    size-limited: 64 GiB written).
    """
    filler = path / FILLER_NAME
    written = 0
    block = b"\0" * _CHUNK
    with open(filler, "ab", buffering=0) as fh:
        while written < 64 * 1024 ** 3:
            try:
                written += fh.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                # A partial page may still fit: take it, so nothing is left for anyone.
                for size in (64 * 1024, 4096, 512, 1):
                    try:
                        while True:
                            written += fh.write(block[:size])
                    except OSError as small:
                        if small.errno != errno.ENOSPC:
                            raise
                return written
    raise RuntimeError(f"{path} took 64 GiB without ENOSPC: not a size-limited filesystem")


def unfill(path: Path) -> None:
    try:
        (path / FILLER_NAME).unlink()
    except FileNotFoundError:
        pass


def entry_log_records(ledger_dir: Path) -> list[dict]:
    """Every record of the entry logs in ``ledger_dir``: dicts with file, ledger_id, entry_id, offset, length."""
    bookie = Path(sys.executable).parent / "bookie"
    done = subprocess.run([str(bookie), "readlog", str(ledger_dir)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"bookie readlog {ledger_dir} failed: {done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def flip_bit(path: Path, offset: int, bit: int) -> None:
    """Flip bit ``bit`` (0..7) of the byte at ``offset`` of ``path``, in place, and sync it."""
    if not 0 <= bit <= 7:
        raise ValueError(f"bit must be in 0..7, got {bit}")
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        if len(old) != 1:
            raise ValueError(f"{path} has no byte at offset {offset}")
        os.pwrite(fd, bytes([old[0] ^ (1 << bit)]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_byte(path: Path, offset: int) -> int:
    """The byte at ``offset`` of ``path``. Raises ValueError past the end."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        b = fh.read(1)
    if len(b) != 1:
        raise ValueError(f"{path} has no byte at offset {offset}")
    return b[0]
