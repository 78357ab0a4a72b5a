"""AckRanges: a cursor's individually acknowledged entries, as runs per ledger.

How it works: each ledger keeps one sorted array of *toggle points*
``t0 < t1 < t2 < ...``; the entries in ``[t0, t1)``, ``[t2, t3)``, ... are
acknowledged and every other entry is not. So an entry ``e`` is acknowledged
exactly when ``bisect_right(t, e)`` is odd (O(log n)), acknowledging an entry
next to a run moves one toggle or merges two runs in place, and the toggles
are machine integers in an ``array('q')`` -- 16 bytes per run of acknowledged
entries, where a set of ``Position`` tuples costs well over 100 bytes per
entry. A ledger's array only holds that ledger's runs, so an insertion moves
at most one ledger's worth of memory.

The differences between consecutive toggles are the run lengths of the
ledger's ack bitmap (unacked, acked, unacked, ...): that is the persisted
form. ``encode`` narrows them to the smallest integer width that holds them
and zlib-compresses each ledger's block; a block is cached until its ledger
changes, so persisting after an ack re-encodes only the ledgers that ack
touched. Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import struct
import sys
import zlib
from array import array

from storage.errors import CursorStateCorruptError

MAGIC = b"MAR1"
_HEADER = struct.Struct("<4sI")  # magic, number of ledger blocks
_BLOCK = struct.Struct("<qIcI")  # ledger id, number of toggles, width typecode, compressed length
_WIDTHS = ((0xFF, "B"), (0xFFFF, "H"), (0xFFFF_FFFF, "I"), ((1 << 63) - 1, "q"))


def _typecode_for(largest: int) -> str:
    for limit, code in _WIDTHS:
        if largest <= limit and array(code).itemsize * 8 >= limit.bit_length():
            return code
    raise CursorStateCorruptError(f"run length {largest} does not fit in 63 bits")


class AckRanges:
    """Disjoint runs of acknowledged (ledger id, entry id) positions, with their total count."""

    __slots__ = ("_toggles", "_ledger_ids", "_counts", "_count", "_blocks")

    def __init__(self) -> None:
        self._toggles: dict[int, array] = {}
        self._ledger_ids: list[int] = []  # sorted keys of _toggles
        self._counts: dict[int, int] = {}
        self._count = 0
        self._blocks: dict[int, bytes] = {}  # encoded block per unchanged ledger

    # ---- queries ---------------------------------------------------------------

    def __len__(self) -> int:
        """How many entries are acknowledged."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def range_count(self) -> int:
        return sum(len(t) for t in self._toggles.values()) // 2

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        toggles = self._toggles.get(ledger_id)
        return toggles is not None and bisect.bisect_right(toggles, entry_id) & 1 == 1

    def ranges(self):
        """Yield (ledger id, first entry, last entry) for every run, in position order."""
        for ledger_id in self._ledger_ids:
            toggles = self._toggles[ledger_id]
            for i in range(0, len(toggles), 2):
                yield ledger_id, toggles[i], toggles[i + 1] - 1

    def unacked_runs(self, ledger_id: int, start: int, stop: int):
        """Yield (first, end) half-open runs of entries in [start, stop) of a ledger that are not acknowledged."""
        toggles = self._toggles.get(ledger_id)
        if not toggles:
            if start < stop:
                yield start, stop
            return
        i = bisect.bisect_right(toggles, start)
        entry = start
        if i & 1:  # start is inside an acknowledged run: continue after it
            entry = toggles[i]
            i += 1
        n = len(toggles)
        while entry < stop:
            end = min(toggles[i], stop) if i < n else stop
            if end > entry:
                yield entry, end
            if i + 1 >= n:
                return
            entry = toggles[i + 1]
            i += 2

    # ---- changes ---------------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int) -> bool:
        """Acknowledge one entry; False if it already was."""
        toggles = self._toggles.get(ledger_id)
        if toggles is None:
            self._new_ledger(ledger_id, array("q", (entry_id, entry_id + 1)))
            self._changed(ledger_id, 1)
            return True
        i = bisect.bisect_right(toggles, entry_id)
        if i & 1:
            return False
        joins_left = i > 0 and toggles[i - 1] == entry_id  # the run before ends just before this entry
        joins_right = i < len(toggles) and toggles[i] == entry_id + 1  # the run after starts just after it
        if joins_left and joins_right:
            del toggles[i - 1:i + 1]
        elif joins_left:
            toggles[i - 1] = entry_id + 1
        elif joins_right:
            toggles[i] = entry_id
        else:
            toggles[i:i] = array("q", (entry_id, entry_id + 1))
        self._changed(ledger_id, 1)
        return True

    def add_range(self, ledger_id: int, first: int, last: int) -> int:
        """Acknowledge entries first..last (inclusive); returns how many were not acknowledged before."""
        if last < first:
            return 0
        lo, hi = first, last + 1
        toggles = self._toggles.get(ledger_id)
        if toggles is None:
            self._new_ledger(ledger_id, array("q", (lo, hi)))
            self._changed(ledger_id, hi - lo)
            return hi - lo
        i = bisect.bisect_left(toggles, lo)
        j = bisect.bisect_right(toggles, hi)
        before = self._acked_within(toggles, lo, hi)
        replacement = array("q")
        if i & 1 == 0:  # lo is outside any run: a run starts there
            replacement.append(lo)
        if j & 1 == 0:  # hi is outside any run: the new run ends there
            replacement.append(hi)
        toggles[i:j] = replacement
        added = (hi - lo) - before
        self._changed(ledger_id, added)
        return added

    def pop_run_at(self, ledger_id: int, entry_id: int) -> int | None:
        """If a run starts exactly at this entry and no earlier run exists in its ledger, remove it: its last entry."""
        toggles = self._toggles.get(ledger_id)
        if not toggles or toggles[0] != entry_id:
            return None
        last = toggles[1] - 1
        del toggles[0:2]
        self._changed(ledger_id, -(last - entry_id + 1))
        return last

    def remove_up_to(self, ledger_id: int, entry_id: int) -> None:
        """Forget every acknowledged position at or before (ledger_id, entry_id) (the mark-delete moved there)."""
        cut = bisect.bisect_right(self._ledger_ids, ledger_id - 1)
        for lid in self._ledger_ids[:cut]:
            self._toggles[lid] = array("q")
            self._changed(lid, -self._counts[lid])
        toggles = self._toggles.get(ledger_id)
        if toggles:
            i = bisect.bisect_right(toggles, entry_id)
            removed = self._acked_within(toggles, toggles[0], entry_id + 1)
            if i & 1 and toggles[i] != entry_id + 1:
                toggles[:i] = array("q", (entry_id + 1,))
            else:
                del toggles[:i + (i & 1)]
            self._changed(ledger_id, -removed)

    def clear(self) -> None:
        self._toggles.clear()
        self._ledger_ids.clear()
        self._counts.clear()
        self._blocks.clear()
        self._count = 0

    def _new_ledger(self, ledger_id: int, toggles: array) -> None:
        self._toggles[ledger_id] = toggles
        self._counts[ledger_id] = 0
        bisect.insort(self._ledger_ids, ledger_id)

    def _changed(self, ledger_id: int, delta: int) -> None:
        self._blocks.pop(ledger_id, None)
        self._count += delta
        self._counts[ledger_id] += delta
        if not self._toggles[ledger_id]:
            del self._toggles[ledger_id]
            del self._counts[ledger_id]
            self._ledger_ids.remove(ledger_id)

    @staticmethod
    def _acked_within(toggles: array, lo: int, hi: int) -> int:
        """How many acknowledged entries lie in [lo, hi)."""
        k = bisect.bisect_right(toggles, lo)
        k -= k & 1  # the run containing lo, or the first run after it
        total = 0
        while k < len(toggles) and toggles[k] < hi:
            total += max(0, min(toggles[k + 1], hi) - max(toggles[k], lo))
            k += 2
        return total

    # ---- persisted form ------------------------------------------------------------

    def encode(self) -> bytes:
        """The compact persisted form (see the module docstring); ``decode`` restores it exactly."""
        blocks = [self._blocks.get(lid) or self._encode_ledger(lid) for lid in self._ledger_ids]
        return _HEADER.pack(MAGIC, len(blocks)) + b"".join(blocks)

    def _encode_ledger(self, ledger_id: int) -> bytes:
        toggles = self._toggles[ledger_id]
        lengths = array("q", toggles[:1])
        lengths.extend(map(operator.sub, toggles[1:], toggles))
        code = _typecode_for(max(lengths))
        narrow = array(code, lengths)
        if sys.byteorder == "big":
            narrow.byteswap()
        body = zlib.compress(narrow.tobytes(), 1)
        block = _BLOCK.pack(ledger_id, len(toggles), code.encode(), len(body)) + body
        self._blocks[ledger_id] = block
        return block

    @classmethod
    def decode(cls, data: bytes) -> "AckRanges":
        """Raises CursorStateCorruptError for anything ``encode`` cannot have produced."""
        out = cls()
        view = memoryview(data)
        if len(view) < _HEADER.size:
            raise CursorStateCorruptError(f"ack state of {len(view)} bytes is shorter than its header")
        magic, nblocks = _HEADER.unpack_from(view, 0)
        if magic != MAGIC:
            raise CursorStateCorruptError(f"ack state has magic {bytes(magic)!r}, expected {MAGIC!r}")
        offset = _HEADER.size
        previous = None
        for _ in range(nblocks):
            if offset + _BLOCK.size > len(view):
                raise CursorStateCorruptError("ack state ends inside a ledger block header")
            ledger_id, ntoggles, code, length = _BLOCK.unpack_from(view, offset)
            offset += _BLOCK.size
            body = bytes(view[offset:offset + length])
            offset += length
            if len(body) != length:
                raise CursorStateCorruptError(f"ack state ends inside the block of ledger {ledger_id}")
            if previous is not None and ledger_id <= previous:
                raise CursorStateCorruptError(f"ledger blocks out of order: {ledger_id} after {previous}")
            previous = ledger_id
            out._decode_ledger(ledger_id, ntoggles, code.decode("ascii", "replace"), body)
        if offset != len(view):
            raise CursorStateCorruptError(f"{len(view) - offset} bytes after the last ledger block")
        return out

    def _decode_ledger(self, ledger_id: int, ntoggles: int, code: str, body: bytes) -> None:
        if code not in {c for _, c in _WIDTHS}:
            raise CursorStateCorruptError(f"ledger {ledger_id}: unknown run-length width {code!r}")
        try:
            raw = zlib.decompress(body)
        except zlib.error as exc:
            raise CursorStateCorruptError(f"ledger {ledger_id}: {exc}") from exc
        lengths = array(code)
        if len(raw) != ntoggles * lengths.itemsize or ntoggles == 0 or ntoggles % 2:
            raise CursorStateCorruptError(f"ledger {ledger_id}: {len(raw)} bytes do not hold {ntoggles} run lengths")
        lengths.frombytes(raw)
        if sys.byteorder == "big":
            lengths.byteswap()
        if lengths[0] < 0 or (ntoggles > 1 and min(lengths[1:]) <= 0):
            raise CursorStateCorruptError(f"ledger {ledger_id}: runs must not be empty")
        toggles = array("q", itertools.accumulate(lengths))
        self._toggles[ledger_id] = toggles
        self._ledger_ids.append(ledger_id)
        count = sum(toggles[1::2]) - sum(toggles[0::2])
        self._counts[ledger_id] = count
        self._count += count
        self._blocks[ledger_id] = _BLOCK.pack(ledger_id, ntoggles, code.encode(), len(body)) + body
