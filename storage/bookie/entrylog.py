"""Entry logs: where entries live once they leave the journal.

Entries of all ledgers are appended, interleaved, to one current file
``entrylog-<id>.log`` in the ledger directory; it rolls to a new id at
``entry_log_max_file_size_bytes``. Interleaving keeps writes sequential no
matter how many ledgers are active; the index (index.py) says where each
entry is. Files are never modified after they roll: deleting ledgers only
makes bytes dead, and compaction copies the live remainder of a mostly-dead
file forward and deletes the file.

File layout (all big-endian):

    header  b"MGEL" [u32 version=1]
    record  [u32 len][i64 ledger_id][i64 entry_id][packaged entry]   len = 16 + len(packaged entry)

A location is (log_id, offset of the packaged entry, its length), so a read
is one pread. Records carry no checksum of their own: the packaged entry has
its CRC32C digest (storage.digest), which readers verify.

Each start opens a fresh log, so nothing is appended after a tail torn by a
crash; ``scan`` stops quietly at such a tail.

Threading: appends, flushes, rolls and deletes come from one thread (the
bookie's storage thread); reads may come from any thread. Readers hold a
reference on a cached file descriptor, and a deleted log's descriptor is
closed only when its last reader is done, so a read racing a deletion can
never pread a recycled descriptor number.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from storage.bookie import file_writes
from storage.bookie.journal import fsync_dir

MAGIC = b"MGEL"
VERSION = 1
_HEADER = struct.Struct(">4sI")
HEADER_SIZE = _HEADER.size
_RECORD = struct.Struct(">Iqq")
RECORD_OVERHEAD = _RECORD.size  # 20 bytes in front of each packaged entry

# Flush the in-memory buffer to the file once it holds this much, so one
# flush of a 64 MiB write cache does not build a 64 MiB bytes object.
_WRITE_CHUNK_BYTES = 1024 * 1024
# Write the log's dirty pages back (and wait) whenever this much was written since the last time, a large entry in
# several steps. A checkpoint appends up to the whole write cache (64 MiB) and then fsyncs; left to the fsync, all of
# it reached the device queue at once, and every journal fdatasync on that disk -- each small add's acknowledgement
# -- queued behind it (measured under a 5 MiB producer: 40-60 MB per checkpoint, entry-log fsyncs of 24-77 ms). In
# steps, a journal sync waits behind one step at most. Durability is unchanged: the flush still ends with fsync.
# The bookie's value is BookieConfig.write_back_step_bytes (256 KiB; 4 MiB steps left the good client's p99 under
# the 5 MiB attack about twice as high, docs/hostile-clients.md).
WRITEBACK_STEP_BYTES = 256 * 1024


class EntryLocation(NamedTuple):
    log_id: int
    offset: int  # of the packaged entry, past the record header
    length: int  # of the packaged entry


class ScannedEntry(NamedTuple):
    ledger_id: int
    entry_id: int
    offset: int
    length: int


def entry_log_name(log_id: int) -> str:
    return f"entrylog-{log_id}.log"


def encode_record(ledger_id: int, entry_id: int, body: bytes) -> bytes:
    return _RECORD.pack(RECORD_OVERHEAD - 4 + len(body), ledger_id, entry_id) + body


class _Reader:
    __slots__ = ("fd", "refs", "doomed")

    def __init__(self, fd: int):
        self.fd = fd
        self.refs = 0
        self.doomed = False


class EntryLogger:
    """The entry logs of one ledger directory. See the module docstring."""

    def __init__(
        self,
        ledger_dir: Path,
        max_file_size_bytes: int,
        *,
        on_write: Callable[[int], None] | None = None,
        write_back: Callable[[int], None] | None = file_writes.write_back,
        write_back_step_bytes: int = WRITEBACK_STEP_BYTES,
    ):
        self.dir = Path(ledger_dir)
        self._max = max_file_size_bytes
        self._on_write = on_write
        self._write_back = write_back
        self._write_back_step = write_back_step_bytes
        self._unwritten_back = 0  # bytes written to the current log since its last write-back
        self._fd = -1
        self._log_id = 0
        self._pos = 0  # logical end of the current log, buffered bytes included
        self._buffer = bytearray()
        self._broken = False
        self._readers: dict[int, _Reader] = {}
        self._readers_lock = threading.Lock()
        file_writes.remove_leftovers(self.dir)  # a deletion a crash interrupted (delete)
        self._roll(max(self.log_ids(), default=0) + 1)

    @property
    def current_log_id(self) -> int:
        return self._log_id

    def log_ids(self) -> list[int]:
        ids = []
        for name in os.listdir(self.dir):
            if name.startswith("entrylog-") and name.endswith(".log"):
                try:
                    ids.append(int(name[len("entrylog-") : -len(".log")]))
                except ValueError:
                    continue
        return sorted(ids)

    def path(self, log_id: int) -> Path:
        return self.dir / entry_log_name(log_id)

    def file_size(self, log_id: int) -> int:
        if log_id == self._log_id:
            return self._pos
        return self.path(log_id).stat().st_size

    # -- writing (storage thread) ---------------------------------------

    def append(self, ledger_id: int, entry_id: int, body: bytes) -> EntryLocation:
        """Buffer one entry; it is on disk after ``flush()``, not before."""
        if self._broken:
            self._replace_broken_log()
        record_len = RECORD_OVERHEAD + len(body)
        if self._pos > HEADER_SIZE and self._pos + record_len > self._max:
            self._roll(self._log_id + 1)
        location = EntryLocation(self._log_id, self._pos + RECORD_OVERHEAD, len(body))
        self._buffer += _RECORD.pack(RECORD_OVERHEAD - 4 + len(body), ledger_id, entry_id)
        self._pos += record_len
        if len(body) >= _WRITE_CHUNK_BYTES:
            # A large entry is written from where it is, after what is buffered: copied into the buffer (and into
            # a record before that) it was two more copies of up to 5 MiB, made holding the GIL.
            self._write_buffer()
            self._write(body)
            return location
        self._buffer += body
        if len(self._buffer) >= _WRITE_CHUNK_BYTES:
            self._write_buffer()
        return location

    def flush(self) -> None:
        """Write what is buffered and fsync the current log. Logs that rolled
        were synced as they rolled, so after this every appended entry is durable."""
        if self._broken:
            self._replace_broken_log()
        try:
            self._write_buffer()
            os.fsync(self._fd)
        except OSError:
            # The tail of this log is now unknown (a partial write, or pages
            # a failed fsync may have dropped), so offsets past the last good
            # flush cannot be trusted: drop the buffer and continue in a new
            # log. The caller did not commit these locations and will re-append.
            self._buffer.clear()
            self._broken = True
            raise

    def _write_buffer(self) -> None:
        if not self._buffer:
            return
        self._write(self._buffer)
        self._buffer.clear()

    def _write(self, data) -> None:
        """Write ``data``, sending it to the device in steps of ``write_back_step_bytes`` (waited for each): a
        5 MiB entry is several steps, so the device queue never holds more than one step of it."""
        stepping = self._write_back is not None and self._write_back_step > 0
        with memoryview(data) as view:
            written = 0
            while written < len(view):
                # below the step at the top of each turn: it is written back (and reset) once it reaches it
                end = min(len(view), written + self._write_back_step - self._unwritten_back) if stepping else len(view)
                n = os.write(self._fd, view[written:end])
                written += n
                self._unwritten_back += n
                if stepping and self._unwritten_back >= self._write_back_step:
                    self._write_back(self._fd)
                    self._unwritten_back = 0
        if self._on_write is not None:
            self._on_write(written)

    def _replace_broken_log(self) -> None:
        self._roll(self._log_id + 1, sync_current=False)
        self._broken = False

    def _roll(self, log_id: int, sync_current: bool = True) -> None:
        if self._fd >= 0 and sync_current:
            self.flush()
        # Create the next log before letting go of the current one, so a
        # failure here (disk full) leaves a usable current log behind.
        fd = os.open(self.path(log_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            os.write(fd, _HEADER.pack(MAGIC, VERSION))
            os.fsync(fd)
            fsync_dir(self.dir)  # the index will point into this file: its name must survive a crash
        except OSError:
            os.close(fd)
            self.path(log_id).unlink(missing_ok=True)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._log_id, self._pos, self._unwritten_back = fd, log_id, HEADER_SIZE, 0

    def delete(self, log_id: int) -> None:
        if log_id == self._log_id:
            raise ValueError(f"entry log {log_id} is the current log and cannot be deleted")
        with self._readers_lock:  # readers open logs under this lock: none opens this one after the rename
            aside = file_writes.set_aside(self.path(log_id))
            reader = self._readers.pop(log_id, None)
            being_read = reader is not None and reader.refs > 0
            if reader is not None:
                reader.doomed = True
                if reader.refs == 0:
                    os.close(reader.fd)
        fsync_dir(self.dir)
        if aside is None:
            return
        if being_read:  # a read under way keeps its bytes: unlinked, they last until its descriptor closes
            os.unlink(aside)
        else:  # in synced steps, as the journal's files (file_writes.remove_in_steps says why)
            file_writes.shrink_and_unlink(aside)

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1
        with self._readers_lock:
            for reader in self._readers.values():
                reader.doomed = True
                if reader.refs == 0:
                    os.close(reader.fd)
            self._readers.clear()

    # -- reading (any thread) -------------------------------------------

    def read(self, location: EntryLocation) -> bytes:
        """The packaged entry at ``location``. Raises FileNotFoundError if the
        log is gone (compacted away since the location was looked up)."""
        reader = self._acquire(location.log_id)
        try:
            data = os.pread(reader.fd, location.length, location.offset)
        finally:
            self._release(reader)
        return data

    def _acquire(self, log_id: int) -> _Reader:
        with self._readers_lock:
            reader = self._readers.get(log_id)
            if reader is None:
                reader = _Reader(os.open(self.path(log_id), os.O_RDONLY))
                self._readers[log_id] = reader
            reader.refs += 1
            return reader

    def _release(self, reader: _Reader) -> None:
        with self._readers_lock:
            reader.refs -= 1
            if reader.doomed and reader.refs == 0:
                os.close(reader.fd)

    def scan(self, log_id: int) -> Iterator[ScannedEntry]:
        """Every record of a log in file order, stopping at a torn tail.

        Only the current log can still be growing; scanning it sees what was
        written so far.
        """
        return scan_file(self.path(log_id))


def scan_file(path: Path) -> Iterator[ScannedEntry]:
    """Every record of the entry log file at ``path`` in file order, stopping at a torn tail."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        header = fh.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE or _HEADER.unpack(header)[0] != MAGIC:
            return
        pos = HEADER_SIZE
        while pos + RECORD_OVERHEAD <= size:
            raw = fh.read(RECORD_OVERHEAD)
            if len(raw) < RECORD_OVERHEAD:
                return
            length, ledger_id, entry_id = _RECORD.unpack(raw)
            body_len = length - (RECORD_OVERHEAD - 4)
            body_at = pos + RECORD_OVERHEAD
            if body_len < 0 or body_at + body_len > size:
                return
            yield ScannedEntry(ledger_id, entry_id, body_at, body_len)
            fh.seek(body_len, os.SEEK_CUR)
            pos = body_at + body_len
