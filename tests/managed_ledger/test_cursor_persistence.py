"""A cursor's whole ack state survives a crash, however big: chunked writes, a crash between chunks, fallbacks."""

from __future__ import annotations

import asyncio
import json
import random

import msgpack
import pytest

from storage.errors import StorageError
from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory, Position
from storage.managed_ledger.cursor_state import Chunk, encode_state, parse_entry
from storage.managed_ledger.factory import Hooks

# 256-byte chunks and a 10-range snapshot cap make a few hundred holes span many entries and miss the snapshot.
CHUNKED = ManagedLedgerConfig(max_entries_per_ledger=300, min_ledger_rollover_time_s=0, cursor_state_chunk_bytes=256,
                              max_unacked_ranges_to_persist_in_metadata_store=10)


class ScriptedChunks(Hooks):
    """Stops (or fails) the cursor writer before a chosen chunk, once; the test resumes it."""

    def __init__(self):
        self.stop_at: int | None = None
        self.fail: BaseException | None = None
        self.reached: asyncio.Future | None = None
        self.resume: asyncio.Future | None = None

    def arm(self, index: int, fail: BaseException | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.stop_at, self.fail, self.reached, self.resume = index, fail, loop.create_future(), loop.create_future()

    async def before_cursor_chunk(self, cursor, ledger_id, index, count):
        if self.stop_at is None or index != self.stop_at:
            return
        self.stop_at = None
        self.reached.set_result((ledger_id, count))
        if self.fail is not None:
            raise self.fail
        await self.resume


async def _open(ledgers, name, config=CHUNKED, **kw):
    factory = ManagedLedgerFactory(ledgers.store, await ledgers.client(), **kw)
    return factory, await factory.open(name, config)


async def _fill(ml, n: int) -> list[Position]:
    return list(await asyncio.gather(*(ml.add_entry(b"m%d" % i) for i in range(n))))


def _scatter(positions, seed: int) -> list[Position]:
    """About half of ``positions``, at random: irregular holes do not compress away, so states take many chunks."""
    rng = random.Random(seed)
    return [p for p in positions if rng.random() < 0.5]


def _picture(cursor) -> tuple:
    return (cursor.mark_delete_position, cursor.individually_deleted_ranges, dict(cursor.batch_deleted),
            dict(cursor.properties), cursor.backlog)


async def _last_chunk(factory, cursor_ledger: int) -> Chunk:
    """The last chunk a reader sees (without recovery the last-add-confirmed may lag the writer by an entry)."""
    reader = await factory.client.open_ledger(cursor_ledger, recovery=False)
    try:
        return parse_entry((await reader.read_entry(reader.last_add_confirmed)).payload)
    finally:
        await reader.close()


async def _snapshot(ledgers, ml, name) -> dict:
    data, _ = await ledgers.store.get(ml.cursor_path(name))
    return json.loads(data)


async def test_hundreds_of_holes_span_many_chunks_and_come_back_exactly(ledgers):
    await ledgers.start_bookies(3)
    factory, ml = await _open(ledgers, "t/ns/persistent/chunked")
    positions = await _fill(ml, 3000)  # ten ledgers of 300
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    rng = random.Random(7)
    acked = {p for p in positions[5:] if rng.random() < 0.5}
    await cursor.mark_delete(positions[2], properties={"seq": 9})
    await cursor.delete(sorted(acked))
    await cursor.delete_batch_indexes(positions[3], {0, 5, 63, 64}, batch_size=100)
    before = _picture(cursor)
    assert len(before[1]) > 500, "hundreds of separate ranges"
    snapshot = await _snapshot(ledgers, ml, "sub")
    chunk = await _last_chunk(factory, snapshot["cursor_ledger"])
    assert chunk.count > 3, "the state is split over several entries"

    _, ml2 = await _open(ledgers, "t/ns/persistent/chunked")  # a new owner; the old one never closed (a crash)
    restored = ml2.cursors["sub"]
    assert _picture(restored) == before
    assert restored.batch_deleted_indexes(positions[3]) == frozenset({0, 5, 63, 64})
    unacked = [p for p in positions[3:] if p not in acked]
    got = []
    while entries := await restored.read_entries(37):
        got.extend(e.position for e in entries)
    assert got == unacked, "every unacked entry is read once, no acked one"


async def test_a_crash_between_chunks_restores_the_last_complete_state(ledgers):
    await ledgers.start_bookies(3)
    hooks = ScriptedChunks()
    _, ml = await _open(ledgers, "t/ns/persistent/torn", hooks=hooks)
    positions = await _fill(ml, 2000)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete(_scatter(positions[1:1000], 1))  # state A, several chunks
    complete = _picture(cursor)
    hooks.arm(2)
    torn = cursor.delete(_scatter(positions[1000:], 2))  # state B: dies after two of its chunks
    ledger_id, count = await asyncio.wait_for(hooks.reached, 10)
    assert count > 2 and ledger_id == cursor._ledger.ledger_id, "B goes behind A in the same cursor ledger"
    _, ml2 = await _open(ledgers, "t/ns/persistent/torn")
    restored = ml2.cursors["sub"]
    assert _picture(restored) == complete, "state A exactly: nothing of the torn state B"
    hooks.resume.set_result(None)
    with pytest.raises(StorageError):
        await torn  # the old owner was fenced by the new one's recovery
    # the new owner writes after the torn chunks; a third owner restores what it wrote
    await restored.delete([positions[0]])
    expected = _picture(restored)
    _, ml3 = await _open(ledgers, "t/ns/persistent/torn")
    assert _picture(ml3.cursors["sub"]) == expected


async def test_a_crash_while_moving_to_a_new_cursor_ledger_keeps_the_old_one(ledgers):
    await ledgers.start_bookies(3)
    hooks = ScriptedChunks()
    # about 1 KB per cursor ledger: the second state never fits behind the first
    config = ManagedLedgerConfig(**{**CHUNKED.__dict__, "cursor_max_size_per_ledger_mb": 0.001})
    _, ml = await _open(ledgers, "t/ns/persistent/switch", config, hooks=hooks)
    positions = await _fill(ml, 2000)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete(_scatter(positions[1:1000], 3))
    first_ledger = (await _snapshot(ledgers, ml, "sub"))["cursor_ledger"]
    complete = _picture(cursor)
    hooks.arm(1)
    moving = cursor.delete(_scatter(positions[1000:], 4))  # too big for what is left of the ledger: a new one
    ledger_id, _ = await asyncio.wait_for(hooks.reached, 10)
    assert ledger_id != first_ledger, "the state goes to a new cursor ledger"
    assert (await _snapshot(ledgers, ml, "sub"))["cursor_ledger"] == first_ledger
    _, ml2 = await _open(ledgers, "t/ns/persistent/switch")
    assert _picture(ml2.cursors["sub"]) == complete
    hooks.resume.set_result(None)
    with pytest.raises(StorageError):
        await moving


async def test_a_failed_chunk_sends_the_next_state_to_a_new_ledger(ledgers):
    await ledgers.start_bookies(3)
    hooks = ScriptedChunks()
    factory, ml = await _open(ledgers, "t/ns/persistent/failed-chunk", hooks=hooks)
    positions = await _fill(ml, 2000)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete(_scatter(positions[1:1000], 5))
    ledger_before = (await _snapshot(ledgers, ml, "sub"))["cursor_ledger"]
    hooks.arm(1, fail=StorageError("bookie write failed"))
    with pytest.raises(StorageError):
        await cursor.delete(_scatter(positions[1000:], 6))
    await cursor.delete([positions[0]])  # retried in full, in a fresh ledger
    assert (await _snapshot(ledgers, ml, "sub"))["cursor_ledger"] != ledger_before
    expected = _picture(cursor)
    _, ml2 = await _open(ledgers, "t/ns/persistent/failed-chunk")
    assert _picture(ml2.cursors["sub"]) == expected


async def test_the_snapshot_holds_the_ranges_only_when_small(ledgers):
    await ledgers.start_bookies(3)
    config = ManagedLedgerConfig(**{**CHUNKED.__dict__, "cursor_max_entries_per_ledger": 1})
    factory, ml = await _open(ledgers, "t/ns/persistent/snapshot", config)
    positions = await _fill(ml, 40)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete(positions[1:8:2])  # 4 ranges: each write moves to a new ledger and rewrites the snapshot
    snapshot = (await _snapshot(ledgers, ml, "sub"))["state"]
    assert snapshot["acks_complete"] is True and len(snapshot["deleted"]) == 4
    # with the cursor ledger gone, the snapshot alone restores a small state exactly
    await factory.client.delete_ledger((await _snapshot(ledgers, ml, "sub"))["cursor_ledger"])
    expected = _picture(cursor)
    _, ml2 = await _open(ledgers, "t/ns/persistent/snapshot")
    assert _picture(ml2.cursors["sub"]) == expected
    await ml2.cursors["sub"].delete(positions[11:40:2])  # 15 more ranges: over the cap of 10
    snapshot = (await _snapshot(ledgers, ml2, "sub"))["state"]
    assert snapshot["acks_complete"] is False and "deleted" not in snapshot


async def test_a_state_written_in_the_first_format_is_read(ledgers):
    await ledgers.start_bookies(3)
    factory, ml = await _open(ledgers, "t/ns/persistent/format1")
    positions = await _fill(ml, 10)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete([positions[3]])
    # overwrite what the cursor ledger says with one format-1 entry (a msgpack map), as the earlier code wrote it
    handle = await factory.client.create_ledger(2, 2, 2, password=b"")
    p = positions
    await handle.add_entry(msgpack.packb({"mark_delete": list(p[1]), "deleted": [[p[4].ledger_id, p[4].entry_id, p[6].entry_id]],
                                          "batch_deleted": {f"{p[8].ledger_id}:{p[8].entry_id}": [1, 2]},
                                          "properties": {"k": 5}}))
    doc = await _snapshot(ledgers, ml, "sub")
    data, stat = await ledgers.store.get(ml.cursor_path("sub"))
    await ledgers.store.set(ml.cursor_path("sub"), json.dumps({**doc, "cursor_ledger": handle.ledger_id}).encode(), stat.version)
    _, ml2 = await _open(ledgers, "t/ns/persistent/format1")
    restored = ml2.cursors["sub"]
    assert restored.mark_delete_position == p[1] and restored.properties == {"k": 5}
    assert restored.individually_deleted_ranges == [(p[4].ledger_id, p[4].entry_id, p[6].entry_id)]
    assert restored.batch_deleted_indexes(p[8]) == frozenset({1, 2})


async def test_acks_of_positions_that_do_not_exist_are_ignored(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/bogus")
    positions = await _fill(ml, 5)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ledger_id = positions[0].ledger_id
    await cursor.delete([Position(ledger_id, 4), Position(ledger_id - 1, 10**9), Position(ledger_id, -3)])
    await cursor.delete_batch_indexes(Position(ledger_id, 2), {0, 10**9}, batch_size=2**31 - 1)
    assert cursor.individually_deleted_ranges == [(ledger_id, 4, 4)]
    assert cursor.batch_deleted == {Position(ledger_id, 2): 1}, "indexes beyond the bound are not kept"
    assert cursor.backlog == 4
    await ml.factory.settle()  # the trims the acks started


def test_encoded_state_of_many_holes_is_small():
    from storage.managed_ledger.cursor_state import CursorState, decode_state

    state = CursorState(Position(3, 0))
    for e in range(1, 200_001, 2):
        state.deleted.add(3, e)
    blob = encode_state(state)
    assert len(blob) < 4_000, "100,000 regular holes"
    assert list(decode_state(blob).deleted.ranges()) == list(state.deleted.ranges())


class NaiveCursor:
    """The cursor's contract over a list of existing positions, with sets: the model the real one must match."""

    def __init__(self, positions: list[Position], initial_mark: Position):
        self.positions = positions
        self.initial_mark = initial_mark
        self.acked: set[Position] = set()
        self.batch: dict[Position, set[int]] = {}

    def delete(self, wanted) -> None:
        for p in wanted:
            if p in self.positions and p > self.mark:
                self.acked.add(p)
                self.batch.pop(p, None)

    def mark_delete(self, p: Position) -> None:
        self.acked |= {q for q in self.positions if q <= p}
        self.batch = {q: v for q, v in self.batch.items() if q > p}

    def delete_batch_indexes(self, p: Position, indexes, size: int) -> None:
        if p in self.acked or p not in self.positions:
            return
        got = self.batch.setdefault(p, set())
        got |= {i for i in indexes if 0 <= i < size}
        if len(got) >= size:
            self.delete([p])
        elif not got:
            del self.batch[p]

    @property
    def mark(self) -> Position:
        mark = self.initial_mark
        for p in self.positions:
            if p not in self.acked:
                break
            mark = p
        return mark

    def picture(self) -> tuple:
        mark = self.mark
        runs: list[list[int]] = []
        for p in self.positions:
            if p > mark and p in self.acked:
                if runs and runs[-1][0] == p.ledger_id and runs[-1][2] == p.entry_id - 1:
                    runs[-1][2] = p.entry_id
                else:
                    runs.append([p.ledger_id, p.entry_id, p.entry_id])
        unacked = [p for p in self.positions if p not in self.acked]
        batch = {p: sum(1 << i for i in v) for p, v in self.batch.items() if p not in self.acked}
        return mark, [tuple(r) for r in runs], batch, len(unacked), unacked


async def _real_picture(cursor) -> tuple:
    cursor.rewind()
    unread = []
    while entries := await cursor.read_entries(5):
        unread.extend(e.position for e in entries)
    return (cursor.mark_delete_position, cursor.individually_deleted_ranges, dict(cursor.batch_deleted),
            cursor.backlog, unread)


async def test_a_random_walk_of_acks_matches_a_set_model_and_survives_a_crash(ledgers):
    await ledgers.start_bookies(3)
    config = ManagedLedgerConfig(**{**CHUNKED.__dict__, "max_entries_per_ledger": 7, "cursor_max_entries_per_ledger": 20})
    _, ml = await _open(ledgers, "t/ns/persistent/walk", config)
    positions = await _fill(ml, 120)  # 18 ledgers
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    model = NaiveCursor(positions, cursor.mark_delete_position)
    rng = random.Random(11)
    for step in range(150):
        roll = rng.random()
        if roll < 0.6:
            wanted = rng.sample(positions, rng.randint(1, 6))
            wanted.append(Position(positions[-1].ledger_id + 5, 0))  # never existed: ignored
            await cursor.delete(wanted)
            model.delete(wanted)
        elif roll < 0.7:
            p = positions[min(len(positions) - 1, positions.index(model.mark) + rng.randint(1, 4))] \
                if model.mark in positions else positions[rng.randint(0, 3)]
            await cursor.mark_delete(p)
            model.mark_delete(p)
        else:
            p, indexes = rng.choice(positions), set(rng.sample(range(4), rng.randint(1, 3)))
            await cursor.delete_batch_indexes(p, indexes, batch_size=4)
            model.delete_batch_indexes(p, indexes, 4)
        if step % 10 == 0:
            assert await _real_picture(cursor) == model.picture(), f"step {step}"
    assert await _real_picture(cursor) == model.picture()
    _, ml2 = await _open(ledgers, "t/ns/persistent/walk")
    assert await _real_picture(ml2.cursors["sub"]) == model.picture()
