"""Disk faults on one bookie: a slow disk, a full disk, a bit flip in an entry log.

* ``slow-disk``: every journal fsync of the bookie takes longer (50-500 ms more). The bookie runs in
  fault-injection mode (``MAGNETAR_FAULT_INJECTION=1``; storage/bookie/faults.py), which lets its HTTP
  port set the delay; a production bookie has no such switch.
* ``full-disk``: a real ENOSPC. The cluster gives bookies a size-limited filesystem of their own (a tmpfs,
  ``disk_limit_bytes`` on the launcher); the fault fills it with a filler file until the kernel answers
  ENOSPC. Without the privilege to mount, the fallback injects ENOSPC at the journal's fsync instead and
  says so in the injection's detail. Expected: the bookie turns read-only (its journal failed, or the
  disk monitor saw the usage), writers replace it in their ensembles, reads of what it holds go on.
  Healing removes the filler and restarts the bookie if its journal failed (a failed journal is final
  until restart), then waits until it is writable again.
* ``bit-flip``: one bit of one stored entry in an entry log flips on disk. The entry's CRC32C digest
  catches it: the bookie refuses the corrupt copy (EntryCorruptedOnDisk) and readers take another
  replica. Healing flips the bit back if the bytes are still where they were (compaction may have moved
  the entry since), so the fault takes a replica away only while it is active, as the schedule counts it.
"""

from __future__ import annotations

import random
from pathlib import Path

from loadtest.nemesis.fault import Fault, Injected
from storage.testing import disk
from storage.testing.waiting import wait_until

HEAL_TIMEOUT_S = 60.0
SLOW_FSYNC_DELAYS_MS = (50, 200, 500)


def _bookies(cluster) -> list:
    """Live bookies no other active fault holds (``cluster.busy``, ids of held members)."""
    bookies = getattr(cluster, "bookies", None)
    busy = getattr(cluster, "busy", set())
    return [b for b in bookies.bookies if b.alive and id(b) not in busy] if bookies is not None else []


def _hold(cluster, bookie) -> None:
    getattr(cluster, "busy", set()).add(id(bookie))


def _release(cluster, bookie) -> None:
    getattr(cluster, "busy", set()).discard(id(bookie))


class SlowDisk(Fault):
    kind = "slow-disk"
    bookie_faults = 1  # its adds may time out and count as a failure, so the schedule budgets for it

    def __init__(self, delay_ms: float | None = None):
        self.delay_ms = delay_ms
        self.target = None

    def applicable(self, cluster) -> bool:
        return any(b.fault_injection for b in _bookies(cluster))

    def inject(self, cluster, rng: random.Random) -> Injected:
        self.target = rng.choice([b for b in _bookies(cluster) if b.fault_injection])
        _hold(cluster, self.target)
        delay = self.delay_ms if self.delay_ms is not None else rng.choice(SLOW_FSYNC_DELAYS_MS)
        self.target.set_journal_faults(fsync_delay_ms=delay)
        return Injected(self.kind, self.target.name, f"journal fsync +{delay} ms")

    def heal(self, cluster) -> None:
        if self.target is None:
            return
        try:
            if self.target.alive:
                self.target.set_journal_faults()
        finally:
            _release(cluster, self.target)


class FullDisk(Fault):
    kind = "full-disk"
    bookie_faults = 1

    def __init__(self, bookie=None):
        self.target = bookie
        self.fallback = False

    def applicable(self, cluster) -> bool:
        return any(b.disk_mounted or b.fault_injection for b in _bookies(cluster))

    def inject(self, cluster, rng: random.Random) -> Injected:
        bookies = _bookies(cluster)
        if self.target is None:
            mounted = [b for b in bookies if b.disk_mounted]
            self.target = rng.choice(mounted or [b for b in bookies if b.fault_injection])
        _hold(cluster, self.target)
        if self.target.disk_mounted:
            written = disk.fill(Path(self.target.data_dir))
            return Injected(self.kind, self.target.name,
                            f"filled its {self.target.disk_limit_bytes // 2**20} MiB tmpfs with {written} bytes "
                            "until the kernel answered ENOSPC")
        self.fallback = True
        self.target.set_journal_faults(fsync_error="ENOSPC")
        why = self.target.disk_refused or "none was asked for"
        return Injected(self.kind, self.target.name, f"FALLBACK: no size-limited filesystem ({why}); "
                        "every journal fsync fails with an injected ENOSPC")

    def heal(self, cluster) -> None:
        bookie = self.target
        if bookie is None:
            return
        try:
            self._heal(bookie)
        finally:
            _release(cluster, bookie)

    def _heal(self, bookie) -> None:
        if self.fallback:
            if bookie.alive:
                bookie.set_journal_faults()
        else:
            disk.unfill(Path(bookie.data_dir))
        if not bookie.alive:
            return  # another fault killed it; whoever restarts it finds the space back
        if not bookie.is_healthy():  # /health says "journal failed": final until restart
            bookie.restart(HEAL_TIMEOUT_S)
        wait_until(lambda: bookie.info()["state"] == "writable", HEAL_TIMEOUT_S,
                   lambda: f"{bookie.name} to be writable again: {bookie.info()}")


class BitFlip(Fault):
    kind = "bit-flip"
    bookie_faults = 1  # one replica of one entry is bad until healed

    def __init__(self, bookie=None, ledger_id: int | None = None, entry_id: int | None = None):
        self.bookie, self.ledger_id, self.entry_id = bookie, ledger_id, entry_id
        self.flipped: tuple[Path, int, int, int] | None = None  # (file, offset, bit, flipped byte)

    def applicable(self, cluster) -> bool:
        return bool(_bookies(cluster))

    def inject(self, cluster, rng: random.Random) -> Injected:
        candidates = [self.bookie] if self.bookie is not None else _bookies(cluster)
        rng.shuffle(candidates)
        for bookie in candidates:
            records = [r for r in disk.entry_log_records(Path(bookie.data_dir) / "ledgers")
                       if r["length"] > 0 and (self.ledger_id is None or r["ledger_id"] == self.ledger_id)
                       and (self.entry_id is None or r["entry_id"] == self.entry_id)]
            if not records:
                continue
            record = rng.choice(records)
            offset = record["offset"] + rng.randrange(record["length"])
            bit = rng.randrange(8)
            disk.flip_bit(Path(record["file"]), offset, bit)
            self.bookie = bookie
            _hold(cluster, bookie)
            self.flipped = (Path(record["file"]), offset, bit, disk.read_byte(Path(record["file"]), offset))
            return Injected(self.kind, bookie.name, f"ledger {record['ledger_id']} entry {record['entry_id']}: "
                            f"bit {bit} of byte {offset} in {Path(record['file']).name}")
        raise RuntimeError(f"{self.kind}: no stored entry in any entry log to flip")

    def heal(self, cluster) -> None:
        if self.flipped is None:
            return
        path, offset, bit, flipped_byte = self.flipped
        try:
            if disk.read_byte(path, offset) == flipped_byte:
                disk.flip_bit(path, offset, bit)
        except (FileNotFoundError, ValueError):
            pass  # compacted away or truncated: the bad copy went with it
        finally:
            _release(cluster, self.bookie)


DISK_FAULTS: list[type[Fault]] = [SlowDisk, FullDisk, BitFlip]
