"""A cursor's ack state with 1,000,000 holes: memory and persist time, beside the set it replaced.

Two patterns of 1,000,000 holes over ledgers of 50,000 entries (Pulsar's default): ``alternate`` (every
other entry acknowledged) and ``random`` (each entry acknowledged with probability 1/2, seeded).
For each, in the same run:

- **memory** (tracemalloc): ``AckRanges`` against the previous representation, a ``set`` of
  ``Position`` tuples holding the same acknowledged entries;
- **persist**: encoding the whole state once (the first write after building it; medians of 5 for
  the write and for the encode after one more ack) (``encode_state`` + chunk framing) and writing its chunks to a
  ledger on three ``bookie start`` processes (E3/Qw2/Qa2, journal fdatasync on, as the cursor does:
  one add after another), against the previous code's persist: sorting the set into ranges and packing
  them with msgpack as one entry. That entry could not hold a million ranges (it is far over the
  5 MiB entry limit), which is why the previous code kept only the first 10,000; both its capped
  and uncapped encode times are given, and the capped write.

- **the dispatch path**: one ``is_deleted`` lookup, and picking the next 100 entries to read (the
  previous code walked a window of ``100 + len(deleted)`` positions on every read).

``python -m loadtest.bench cursor [--quick]`` (quick: 100,000 holes).
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgpack

from loadtest.bench.report import print_table
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.managed_ledger.ack_ranges import AckRanges
from storage.managed_ledger.config import ManagedLedgerConfig
from storage.managed_ledger.cursor_state import CursorState, decode_state, encode_state, frame_chunks, join_chunks, parse_entry
from storage.managed_ledger.position import Position

ENTRIES_PER_LEDGER = 50_000
OLD_CAP = 10_000  # the previous max_unacked_ranges_to_persist
REPEATS = 5  # medians of the cheap measures; the reference's take seconds and run once


def acked_entries(pattern: str, holes: int, seed: int = 1):
    """Yield (ledger, entry) acknowledged so that there are ``holes`` unacked runs between acked ones."""
    rng = random.Random(seed)
    made, index, previous_acked = 0, 0, True
    while made < holes:
        ledger_id, entry_id = 10 + index // ENTRIES_PER_LEDGER, index % ENTRIES_PER_LEDGER
        acked = index % 2 == 1 if pattern == "alternate" else rng.random() < 0.5
        if acked:
            yield ledger_id, entry_id
        elif previous_acked:
            made += 1
        previous_acked = acked
        index += 1


def _traced(build):
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    value = build()
    size = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return value, size


def _old_ranges(positions: set) -> list[tuple[int, int, int]]:
    """The previous code's positions_to_ranges, kept here as the reference."""
    out: list[list[int]] = []
    for ledger_id, entry_id in sorted(positions):
        if out and out[-1][0] == ledger_id and out[-1][2] == entry_id - 1:
            out[-1][2] = entry_id
        else:
            out.append([ledger_id, entry_id, entry_id])
    return [tuple(r) for r in out]


def _old_payload(ranges) -> bytes:
    return msgpack.packb({"mark_delete": [10, -1], "deleted": [list(r) for r in ranges], "batch_deleted": {},
                          "properties": {}})


def _old_positions_from(first_ledger: int, limit: int):
    """The previous read window: every position from the start, ``max_entries + len(deleted)`` of them."""
    index = 0
    while limit > 0:
        yield Position(first_ledger + index // ENTRIES_PER_LEDGER, index % ENTRIES_PER_LEDGER)
        index += 1
        limit -= 1


def _hot_path(new: AckRanges, old: set, acked: list) -> dict:
    """Per-call costs on the dispatch path: is this entry acked, ack one more, pick the next 100 to read."""
    rng = random.Random(3)
    probes = [rng.choice(acked) for _ in range(10_000)]
    t0 = time.perf_counter()
    for ledger_id, entry_id in probes:
        new.contains(ledger_id, entry_id)
    new_lookup = (time.perf_counter() - t0) / len(probes)
    t0 = time.perf_counter()
    for p in probes:
        Position(*p) in old  # noqa: B015 (the membership test is what is measured)
    old_lookup = (time.perf_counter() - t0) / len(probes)

    t0 = time.perf_counter()
    picked: list[Position] = []
    for lo, hi in new.unacked_runs(10, 0, ENTRIES_PER_LEDGER):
        picked.extend(Position(10, e) for e in range(lo, min(hi, lo + 100 - len(picked))))
        if len(picked) >= 100:
            break
    new_pick = time.perf_counter() - t0
    t0 = time.perf_counter()
    window = list(_old_positions_from(10, 100 + len(old)))
    old_picked = [p for p in window if p not in old][:100]
    old_pick = time.perf_counter() - t0
    assert picked == old_picked
    return {"is_deleted_new_us": new_lookup * 1e6, "is_deleted_old_us": old_lookup * 1e6,
            "next_100_to_read_new_ms": new_pick * 1000, "next_100_to_read_old_ms": old_pick * 1000}


async def _write(client: LedgerClient, chunks: list[bytes]) -> float:
    ledger = await client.create_ledger(3, 2, 2, password=b"bench")
    try:
        t0 = time.perf_counter()
        for chunk in chunks:
            await ledger.add_entry(chunk)
        return time.perf_counter() - t0
    finally:
        await ledger.close()
        await client.delete_ledger(ledger.ledger_id)


async def _measure(metadata_url: str, holes: int) -> dict:
    client = await LedgerClient.open(metadata_url, ClientConfig())
    await client.registry.wait_for(lambda r: len(r.writable()) >= 3, 30)
    chunk_bytes = ManagedLedgerConfig().cursor_state_chunk_bytes
    out = {}
    try:
        await _write(client, [b"warm-up"] * 10)
        for pattern in ("alternate", "random"):
            acked = list(acked_entries(pattern, holes))

            def build_new():
                ranges = AckRanges()
                for ledger_id, entry_id in acked:
                    ranges.add(ledger_id, entry_id)
                return ranges

            def build_old():
                return {Position(ledger_id, entry_id) for ledger_id, entry_id in acked}

            new, new_bytes = _traced(build_new)
            old, old_bytes = _traced(build_old)
            assert len(new) == len(old) == len(acked)
            ranges = new.range_count

            t0 = time.perf_counter()
            chunks = frame_chunks(encode_state(CursorState(Position(10, -1), new)), 1, chunk_bytes)
            encode_s = time.perf_counter() - t0
            write_s = statistics.median([await _write(client, chunks) for _ in range(REPEATS)])
            t0 = time.perf_counter()
            restored = decode_state(join_chunks([parse_entry(c) for c in chunks]))
            restore_decode_s = time.perf_counter() - t0
            assert len(restored.deleted) == len(acked)
            after_one_ack = []
            for _ in range(REPEATS):  # one more ack each time: only its ledger's block is encoded again
                hole = next(e for e in range(ENTRIES_PER_LEDGER) if not new.contains(10, e))
                t0 = time.perf_counter()
                new.add(10, hole)
                frame_chunks(encode_state(CursorState(Position(10, -1), new)), 2, chunk_bytes)
                after_one_ack.append(time.perf_counter() - t0)
                old.add(Position(10, hole))  # the reference sees the same acks
            encode_after_one_ack_s = statistics.median(after_one_ack)

            t0 = time.perf_counter()
            old_ranges = _old_ranges(old)
            old_full = _old_payload(old_ranges)
            old_encode_full_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            old_capped = _old_payload(_old_ranges(old)[:OLD_CAP])
            old_encode_capped_s = time.perf_counter() - t0
            old_write_capped_s = await _write(client, [old_capped])
            hot = _hot_path(new, old, acked)
            out[pattern] = {
                "holes": holes, "acked_entries": len(acked), "ranges": ranges,
                "memory_new_bytes": new_bytes, "memory_old_set_bytes": old_bytes, "memory_ratio_old_to_new": old_bytes / new_bytes,
                "persist_new_bytes": sum(map(len, chunks)), "persist_new_chunks": len(chunks),
                "persist_new_encode_s": encode_s, "persist_new_write_s": write_s,
                "persist_new_s": encode_s + write_s, "restore_decode_s": restore_decode_s,
                "encode_after_one_ack_s": encode_after_one_ack_s,
                "persist_old_full_bytes": len(old_full), "persist_old_full_encode_s": old_encode_full_s,
                "persist_old_full_fits_one_entry": len(old_full) <= ClientConfig().max_entry_bytes,
                "persist_old_capped_bytes": len(old_capped), "persist_old_capped_ranges": min(OLD_CAP, len(old_ranges)),
                "persist_old_capped_s": old_encode_capped_s + old_write_capped_s,
                **hot,
            }
            del new, old, acked, restored
    finally:
        await client.close()
    return out


def run(quick: bool = False) -> dict:
    from storage.testing.processes import BookieCluster
    from storage.testing.zookeeper import ZooKeeperServer

    holes = 100_000 if quick else 1_000_000
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-cursor-"))
    with ZooKeeperServer(root / "zk") as zk, BookieCluster(zk.url("/bench"), root / "bookies") as cluster:
        results = asyncio.run(_measure(cluster.metadata_url, holes))
    rows = []
    for pattern, r in results.items():
        rows.append({"pattern": pattern, "what": "memory", "new": f"{r['memory_new_bytes'] / 1e6:.1f} MB",
                     "old (set of Position)": f"{r['memory_old_set_bytes'] / 1e6:.1f} MB",
                     "ratio": f"{r['memory_ratio_old_to_new']:.1f}x smaller"})
        rows.append({"pattern": pattern, "what": "persist (encode + write)",
                     "new": f"{r['persist_new_s'] * 1000:.0f} ms, {r['persist_new_bytes'] / 1e3:.0f} kB in {r['persist_new_chunks']} chunk(s)",
                     "old (set of Position)": f"{r['persist_old_capped_s'] * 1000:.0f} ms for the first {r['persist_old_capped_ranges']:,} ranges only; "
                                              f"all: {r['persist_old_full_encode_s'] * 1000:.0f} ms to encode {r['persist_old_full_bytes'] / 1e6:.1f} MB",
                     "ratio": ""})
        rows.append({"pattern": pattern, "what": "is_deleted, per call",
                     "new": f"{r['is_deleted_new_us']:.2f} us", "old (set of Position)": f"{r['is_deleted_old_us']:.2f} us",
                     "ratio": ""})
        rows.append({"pattern": pattern, "what": "pick the next 100 entries to read",
                     "new": f"{r['next_100_to_read_new_ms']:.3f} ms", "old (set of Position)": f"{r['next_100_to_read_old_ms']:.0f} ms",
                     "ratio": f"{r['next_100_to_read_old_ms'] / r['next_100_to_read_new_ms']:,.0f}x faster"})
    print_table(f"cursor ack state, {holes:,} holes", rows, ["pattern", "what", "new", "old (set of Position)", "ratio"])
    return results
