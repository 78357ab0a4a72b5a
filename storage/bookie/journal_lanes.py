"""The bookie's journal as two lanes: one for large ADDs, one for everything else.

How this works
--------------
One journal writer is one queue in front of one disk write and one fdatasync
at a time. Measured under a producer sending 5 MiB messages as fast as it
could, the writer spent 40-270 ms writing and syncing each 5 MiB record, and a
100-byte add that arrived meanwhile waited in the queue for all of it (p99
125 ms of queue wait alone, against 7 ms without the attack). Group-commit
fairness (group_commit.commit_order) only helps records already in the same
group; it cannot help one that arrives while the large write is under way.

So ADDs of ``journal_large_record_bytes`` or more go to a lane of their own: a
second ``Journal`` (own files, own writer thread, own checkpoint mark) in the
``large/`` directory under the journal directory. BookKeeper likewise lets a
bookie run several journal directories, each with its own writer; choosing
the lane by record size is ours. Small adds then sync while a large one is
being written, sharing only the device.

What keeps the guarantees:

* every lane acknowledges a record only after its own fdatasync, so an add is
  still acknowledged only once its bytes are in a journal on disk;
* FENCE and MASTER_KEY records always go to the main lane. A large ADD that
  follows the first sight of its ledger's key is acknowledged only once that
  MASTER_KEY record is durable too (replay would otherwise find an entry of a
  ledger it does not know), and a FENCE completes only once every large ADD
  of its ledger queued before it is durable -- the same promise the single
  FIFO journal gave: a fencing read never misses an add this bookie may still
  acknowledge to the old writer;
* replay reads the main lane first (keys and fences), then the large lane;
  applying an ADD does not depend on its order relative to other ADDs;
* a checkpoint notes both lanes' synced positions before it flushes and moves
  each lane's mark afterwards. Each mark only ever covers flushed records, so
  a crash between the two writes replays a little more, harmlessly.

One ledger's small and large adds may complete in another order than they
arrived. Adds of 256 KiB and more already travel over a second connection
(storage/client/connection.py), so a bookie never saw a ledger's mixed-size
adds in order anyway; the ledger client acknowledges entries in order itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from storage.bookie.config import BookieConfig
from storage.bookie.journal import (
    ADD,
    FENCE,
    MASTER_KEY,
    GroupObserver,
    Journal,
    JournalDamage,
    JournalPosition,
    JournalRecord,
    read_mark,
    write_mark,
)

LARGE_LANE_DIR = "large"


class LaneMarks(NamedTuple):
    """One checkpoint mark per lane (None: that lane has none yet)."""

    main: JournalPosition | None
    large: JournalPosition | None


def lane_for(record: JournalRecord, large_record_bytes: int) -> str:
    """"large" for an ADD of at least ``large_record_bytes`` (0: never), else "main". Pure."""
    if large_record_bytes and record.kind == ADD and len(record.data) >= large_record_bytes:
        return "large"
    return "main"


def all_of(loop: asyncio.AbstractEventLoop, primary: asyncio.Future, others: list[asyncio.Future], *,
           others_must_succeed: bool) -> asyncio.Future:
    """A future that completes once ``primary`` and every one of ``others`` are done, with ``primary``'s outcome --
    or, with ``others_must_succeed``, the first failure among ``others`` (a MASTER_KEY record that never became
    durable fails the large ADD that waited for it)."""
    waiting = {f for f in others if not f.done()}
    if not waiting and not others_must_succeed:
        return primary
    out = loop.create_future()
    waiting.add(primary)

    def outcome() -> BaseException | None:
        if not primary.cancelled() and primary.exception() is not None:
            return primary.exception()
        if others_must_succeed:
            for f in others:
                if f.cancelled():
                    return asyncio.CancelledError()
                if f.exception() is not None:
                    return f.exception()
        return None

    def done(fut: asyncio.Future) -> None:
        waiting.discard(fut)
        if waiting or out.done():
            return
        if primary.cancelled():
            out.cancel()
            return
        exc = outcome()
        if exc is not None:
            out.set_exception(type(exc)(str(exc)))
        else:
            out.set_result(primary.result())

    for fut in list(waiting):
        fut.add_done_callback(done)
    return out


class JournalLanes:
    """The main lane (``journal_dir``) and the large-record lane (``journal_dir/large``). See the module docstring.

    Lifecycle as ``Journal``: ``read_marks()`` -> ``replay(marks)`` -> ``start(loop, on_durable, marks)`` ->
    ``append()`` ... -> ``close()``. Both lanes are always opened, so records a lane holds are replayed whatever
    ``journal_large_record_bytes`` is now."""

    def __init__(
        self,
        journal_dir: Path,
        config: BookieConfig,
        *,
        fsync: Callable[[int], None] | None = None,
        clock: Callable[[], float] | None = None,
        observe_group: GroupObserver | None = None,
    ):
        kwargs = {"fsync": fsync, "observe_group": observe_group}
        if clock is not None:
            kwargs["clock"] = clock
        large_dir = Path(journal_dir) / LARGE_LANE_DIR
        large_dir.mkdir(parents=True, exist_ok=True)
        self.main = Journal(Path(journal_dir), config, **kwargs)
        self.large = Journal(large_dir, config, write_back_step_bytes=config.write_back_step_bytes,
                             thread_nice=config.background_write_nice, **kwargs)
        self._large_record_bytes = config.journal_large_record_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._keys_in_flight: dict[int, asyncio.Future] = {}  # ledger -> its MASTER_KEY record, until durable
        self._large_in_flight: dict[int, set[asyncio.Future]] = {}  # ledger -> its large ADDs, until durable

    # -- replay and marks --------------------------------------------------

    def read_marks(self) -> LaneMarks:
        return LaneMarks(read_mark(self.main.dir), read_mark(self.large.dir))

    def replay(self, marks: LaneMarks) -> Iterator[JournalRecord]:
        """Every record after the marks: the main lane's, then the large lane's."""
        yield from self.main.replay(marks.main)
        yield from self.large.replay(marks.large)

    def damage_by_lane(self) -> list[tuple[Path, list[JournalDamage]]]:
        return [(self.main.dir, self.main.damage), (self.large.dir, self.large.damage)]

    @property
    def damage(self) -> list[JournalDamage]:
        return [*self.main.damage, *self.large.damage]

    def advance_marks(self, marks: LaneMarks, previous: LaneMarks) -> None:
        """Durably move each lane's mark that changed and delete the files wholly before it (blocking)."""
        for journal, mark, old in ((self.main, marks.main, previous.main), (self.large, marks.large, previous.large)):
            if mark is not None and mark != old:
                write_mark(journal.dir, mark)
                journal.remove_files_before(mark.file_id)

    # -- writing -------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, on_durable: Callable[[list[JournalRecord]], None],
              marks: LaneMarks) -> None:
        self._loop = loop
        self.main.start(loop, on_durable, marks.main)
        self.large.start(loop, on_durable, marks.large)

    @property
    def synced_position(self) -> LaneMarks:
        return LaneMarks(self.main.synced_position, self.large.synced_position)

    @property
    def current_file_id(self) -> int:
        """The main lane's current file."""
        return self.main.current_file_id

    @property
    def failed(self) -> BaseException | None:
        return self.main.failed or self.large.failed

    def append(self, record: JournalRecord) -> asyncio.Future:
        """Queue a record in its lane; the future resolves once it is durable (and, for a large ADD, its ledger's
        MASTER_KEY record; for a FENCE, its ledger's large ADDs queued before it). Errors as ``Journal.append``."""
        ledger_id = record.ledger_id
        if lane_for(record, self._large_record_bytes) == "large":
            fut = self.large.append(record)
            if not fut.done():
                self._track(self._large_in_flight.setdefault(ledger_id, set()), fut, ledger_id)
            key = self._keys_in_flight.get(ledger_id)
            return all_of(self._loop, fut, [key], others_must_succeed=True) if key is not None else fut
        fut = self.main.append(record)
        if record.kind == MASTER_KEY and not fut.done():
            self._keys_in_flight[ledger_id] = fut
            fut.add_done_callback(
                lambda f: self._keys_in_flight.pop(ledger_id) if self._keys_in_flight.get(ledger_id) is f else None)
        elif record.kind == FENCE:
            large = self._large_in_flight.get(ledger_id)
            if large:
                return all_of(self._loop, fut, list(large), others_must_succeed=False)  # a failed add was never acked
        return fut

    def _track(self, pending: set[asyncio.Future], fut: asyncio.Future, ledger_id: int) -> None:
        pending.add(fut)

        def forget(f: asyncio.Future) -> None:
            pending.discard(f)
            if not pending and self._large_in_flight.get(ledger_id) is pending:
                del self._large_in_flight[ledger_id]
            if not f.cancelled():
                f.exception()  # retrieved: the caller's future reports it

        fut.add_done_callback(forget)

    async def close(self) -> None:
        await asyncio.gather(self.main.close(), self.large.close())

    async def halt(self) -> None:
        await asyncio.gather(self.main.halt(), self.large.halt())


__all__ = ["ADD", "FENCE", "MASTER_KEY", "JournalLanes", "LaneMarks", "LARGE_LANE_DIR", "all_of", "lane_for"]
