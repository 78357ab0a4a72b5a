"""LogStream: one log stream, loaded on the broker that owns its bundle, over a managed ledger.

How it works:

- **Ledgers.** The stream's records live in the managed ledger
  ``<tenant>/<ns>/stream/<name>`` (storage/managed_ledger/): a chain of
  ledgers that rolls by entries, bytes or age and loses whole ledgers to
  retention or to ``truncate``. Each append is one entry, a record set
  (record_set.py) carrying its first sequence number.
- **One writer, fenced.** Opening a writer is a conditional write of the
  stream's document that raises its ``writer_epoch``; from then on an append
  carrying an older epoch is refused with WriterFenced. Then a new
  managed-ledger object opens the stream: its recovery *fences* the ledger the
  old writer was adding to (the old writer's adds in flight fail at the
  bookies) and its conditional write of the ledger list makes the old
  object's next metadata write fail. So nothing the old writer sends after
  the new writer opened is ever readable. A new owner broker fences the
  same way, so a writer on a broker that lost the stream is fenced too.
- **Sequence numbers** are given by the owner in append order; on load the
  next one is read from the last entry (or the document's floor, written on
  every writer open, when retention has left no entry).
- **Truncation.** ``truncate(before)`` records the point in the document
  (conditional write; it only moves forward) and removes the ledgers wholly
  before it. Positions before the point, or in a ledger retention removed,
  are refused with PositionTruncated.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, NamedTuple

from broker.streams import record_set
from broker.streams.errors import StreamApiError, invalid, placement_refusal
from broker.streams.policies import Policies, dump, load, managed_ledger_name, stream_path
from magnetar.topic_name import NamespaceName
from storage.errors import (
    BadVersionError, ManagedLedgerClosedError, ManagedLedgerError, ManagedLedgerFencedError, MetadataError,
    NoNodeError, StorageError,
)
from storage.managed_ledger import ManagedLedger, Position

log = logging.getLogger(__name__)

MAX_RECORDS_PER_APPEND = 10_000
MAX_RECORDS_PER_BATCH = 10_000
DEFAULT_RECORDS_PER_BATCH = 1_000
MAX_BATCH_BYTES = 4 * 1024 * 1024  # a read batch stays under this unless one entry is bigger
TAIL_POLL_S = 1.0  # a waiting reader re-checks that its stream is still served this often


class StreamPosition(NamedTuple):
    """DistributedLog's DLSN: (ledger, entry, slot in the entry's record set)."""

    ledger_id: int
    entry_id: int
    slot: int = 0

    @property
    def entry(self) -> Position:
        return Position(self.ledger_id, self.entry_id)


class StreamRecord(NamedTuple):
    position: StreamPosition
    sequence: int
    data: bytes
    publish_time_ms: int


def unavailable(what: str, exc: BaseException) -> StreamApiError:
    return placement_refusal(what, exc) or StreamApiError("StreamUnavailable", f"{what}: {exc}")


class LogStream:
    def __init__(self, ctx, ns: NamespaceName, name: str, policies: Policies, doc: dict, version: int):
        self.ctx = ctx  # the StreamService: store, factory, clock, ledger cache size
        self.ns = ns
        self.name = name
        self.policies = policies
        self.doc = doc
        self._version = version
        self.ml: ManagedLedger | None = None
        self.writer_epoch = int(doc.get("writer_epoch", 0))
        self.next_sequence = int(doc.get("next_sequence_floor", 0))
        self.last_position: StreamPosition | None = None
        self.closed = False
        self._writer_lock = asyncio.Lock()

    @property
    def path(self) -> str:
        return stream_path(self.ns, self.name)

    @property
    def truncated_before(self) -> StreamPosition | None:
        point = self.doc.get("truncated_before")
        return StreamPosition(*point) if point else None

    # ---- load --------------------------------------------------------------------

    @classmethod
    async def load(cls, ctx, ns: NamespaceName, name: str, ns_policies: Policies) -> "LogStream":
        try:
            data, stat = await ctx.store.get(stream_path(ns, name))
        except NoNodeError as exc:
            raise StreamApiError("StreamNotFound", f"stream {ns}/{name} does not exist") from exc
        except MetadataError as exc:
            raise unavailable(f"reading stream {ns}/{name}", exc) from exc
        doc = load(data)
        stream = cls(ctx, ns, name, ns_policies.with_overrides(doc.get("overrides", {})), doc, stat.version)
        stream.ml = await stream._open_ml()
        try:
            await stream._recover_sequence()
        except BaseException:
            await stream.close()
            raise
        return stream

    async def _open_ml(self) -> ManagedLedger:
        """A managed-ledger object of its own (not the factory's shared one): opening it fences the previous one's
        last ledger, which is how a writer open fences the previous writer on this broker too."""
        ml = ManagedLedger(self.ctx.factory, managed_ledger_name(self.ns, self.name),
                           self.policies.ml_config(self.ctx.cache_size_mb))
        try:
            return await ml.open()
        except StorageError as exc:
            raise unavailable(f"opening stream {self.ns}/{self.name}", exc) from exc

    async def _recover_sequence(self) -> None:
        last = self.ml.last_confirmed_entry
        if last.entry_id >= 0:
            entries = await self._read([last])
            if entries:
                records = record_set.decode(entries[0].data)
                self.next_sequence = max(self.next_sequence, records.first_sequence + len(records.records))
                self.last_position = StreamPosition(last.ledger_id, last.entry_id, len(records.records) - 1)
        if self.next_sequence > int(self.doc.get("next_sequence_floor", 0)):
            await self._write_doc({**self.doc, "next_sequence_floor": self.next_sequence})

    async def _write_doc(self, doc: dict) -> None:
        """Conditional write of the stream's document; a conflict means another broker serves it now."""
        try:
            stat = await self.ctx.store.set(self.path, dump(doc), self._version)
        except BadVersionError as exc:
            raise StreamApiError("WriterFenced", f"stream {self.ns}/{self.name} changed under this broker: another "
                                 "broker serves it now") from exc
        except NoNodeError as exc:
            raise StreamApiError("StreamNotFound", f"stream {self.ns}/{self.name} was deleted") from exc
        except MetadataError as exc:
            raise unavailable(f"writing stream {self.ns}/{self.name}", exc) from exc
        self.doc, self._version = doc, stat.version

    # ---- writers -------------------------------------------------------------------

    async def open_writer(self) -> int:
        """Fence the previous writer and return the new writer's epoch (see the module docstring)."""
        async with self._writer_lock:
            self._check_open()
            epoch = self.writer_epoch + 1
            await self._write_doc({**self.doc, "writer_epoch": epoch})
            self.writer_epoch = epoch  # from here on the old writer's appends are refused
            old, self.ml = self.ml, await self._open_ml()
            old.fence(ManagedLedgerFencedError(f"writer epoch {epoch} opened"))
            await old.close()
            # The old writer's appends that failed gave up their sequence numbers: count again from what the
            # recovered ledger holds, so sequence numbers stay without gaps.
            self.next_sequence, self.last_position = int(self.doc.get("next_sequence_floor", 0)), None
            await self._recover_sequence()
            return epoch

    def append(self, epoch: int, records: list[bytes]) -> tuple[asyncio.Future, int]:
        """Start appending ``records`` as one entry: (future of its position, first sequence number).
        Appends complete in call order. Raises WriterFenced or InvalidStreamRequest at once."""
        self._check_open()
        if epoch != self.writer_epoch:
            raise StreamApiError("WriterFenced", f"stream {self.ns}/{self.name}: writer epoch {epoch} was fenced by "
                                 f"epoch {self.writer_epoch}")
        if not 1 <= len(records) <= MAX_RECORDS_PER_APPEND:
            raise invalid(f"an append carries 1..{MAX_RECORDS_PER_APPEND} records, got {len(records)}")
        size = record_set.encoded_size(records)
        if size > self.ctx.max_entry_bytes:
            raise invalid(f"an append of {size} bytes exceeds the {self.ctx.max_entry_bytes}-byte entry limit")
        first = self.next_sequence
        data = record_set.encode(first, int(self.ctx.clock() * 1000), records)
        self.next_sequence += len(records)
        ml = self.ml
        add = asyncio.ensure_future(ml.add_entry(data))  # tasks start in creation order: adds stay in call order
        return asyncio.ensure_future(self._appended(ml, epoch, add, len(records))), first

    async def _appended(self, ml: ManagedLedger, epoch: int, add: asyncio.Future, count: int) -> StreamPosition:
        try:
            position = await add
        except ManagedLedgerFencedError as exc:
            raise StreamApiError("WriterFenced", f"stream {self.ns}/{self.name}: writer epoch {epoch} was fenced "
                                 f"({exc})") from exc
        except ManagedLedgerClosedError as exc:
            if epoch != self.writer_epoch:
                raise StreamApiError("WriterFenced", f"stream {self.ns}/{self.name}: writer epoch {epoch} was fenced") from exc
            raise StreamApiError("StreamUnavailable", f"stream {self.ns}/{self.name} was unloaded; open the writer "
                                 "again") from exc
        except StorageError as exc:
            raise unavailable(f"appending to {self.ns}/{self.name}", exc) from exc
        last = StreamPosition(position.ledger_id, position.entry_id, count - 1)
        if self.last_position is None or last > self.last_position:
            self.last_position = last
        return StreamPosition(position.ledger_id, position.entry_id, 0)

    # ---- truncation ----------------------------------------------------------------

    async def truncate(self, before: StreamPosition) -> list[int]:
        """Records before ``before`` become unreadable; ledgers wholly before it are deleted. Returns their ids."""
        self._check_open()
        if before > StreamPosition(*self.ml.next_position, 0):
            raise StreamApiError("InvalidPosition", f"cannot truncate {self.ns}/{self.name} before {tuple(before)}: "
                                 f"past its end {tuple(self.ml.next_position)}")
        current = self.truncated_before
        if current is None or before > current:
            await self._write_doc({**self.doc, "truncated_before": list(before)})
        try:
            return await self.ml.remove_ledgers_before(before.entry)
        except ManagedLedgerFencedError as exc:
            raise StreamApiError("WriterFenced", f"stream {self.ns}/{self.name} moved to another broker") from exc
        except StorageError as exc:
            raise unavailable(f"truncating {self.ns}/{self.name}", exc) from exc

    async def trim(self) -> None:
        """Retention by time and size, and rolling by age (the maintenance timer's)."""
        if not self.closed:
            await self.ml.trim()

    # ---- positions -------------------------------------------------------------------

    def first_readable(self) -> StreamPosition:
        first = StreamPosition(*self.ml.first_position, 0)
        point = self.truncated_before
        return max(first, point) if point is not None else first

    def next_position(self) -> StreamPosition:
        return StreamPosition(*self.ml.next_position, 0)

    def check_readable(self, position: StreamPosition) -> None:
        """PositionTruncated before the first readable record; InvalidPosition past the end or in no ledger."""
        first = self.first_readable()
        if position < first:
            raise StreamApiError("PositionTruncated", f"{self.ns}/{self.name}: position {tuple(position)} was "
                                 f"truncated; the first readable record is at {tuple(first)}")
        end = self.next_position()
        if position > end:
            raise StreamApiError("InvalidPosition", f"{self.ns}/{self.name}: position {tuple(position)} is past the "
                                 f"end {tuple(end)}")
        if position < end and position.ledger_id not in {i.ledger_id for i in self.ml.info.ledgers}:
            raise StreamApiError("InvalidPosition", f"{self.ns}/{self.name}: ledger {position.ledger_id} is not one "
                                 "of the stream's")

    async def _read(self, positions: list[Position]):
        try:
            return await self.ml.read_entries_at(positions)
        except ManagedLedgerError as exc:
            raise StreamApiError("StreamUnavailable", f"{self.ns}/{self.name} moved: {exc}") from exc
        except StorageError as exc:
            raise unavailable(f"reading {self.ns}/{self.name}", exc) from exc

    async def _record_set_at(self, index: int) -> tuple[Position, record_set.RecordSet] | None:
        position = self.ml.position_at_index(index)
        if position is None:
            return None
        entries = await self._read([position])
        return (position, record_set.decode(entries[0].data)) if entries else None

    async def position_of_sequence(self, sequence: int) -> StreamPosition:
        """The position of the record with sequence number ``sequence`` (or of the first one after it)."""
        if sequence < 0:
            raise invalid(f"a sequence number is >= 0, got {sequence}")
        if sequence >= self.next_sequence:
            return self.next_position()
        lo, hi = 0, self.ml.number_of_entries - 1  # the last entry whose first sequence <= sequence
        found = None
        while lo <= hi:
            mid = (lo + hi) // 2
            got = await self._record_set_at(mid)
            if got is None:
                break
            if got[1].first_sequence <= sequence:
                found, lo = got, mid + 1
            else:
                hi = mid - 1
        if found is None:
            raise StreamApiError("PositionTruncated", f"{self.ns}/{self.name}: sequence {sequence} was truncated")
        position, records = found
        slot = sequence - records.first_sequence
        if slot >= len(records.records):
            return StreamPosition(*self.ml.position_after(position), 0)
        return StreamPosition(position.ledger_id, position.entry_id, slot)

    async def first_sequence(self) -> int:
        first = self.first_readable()
        if first >= self.next_position():
            return self.next_sequence
        entries = await self._read([first.entry])
        return record_set.decode(entries[0].data).first_sequence + first.slot if entries else self.next_sequence

    # ---- reading ---------------------------------------------------------------------

    def tail(self, start: StreamPosition, max_records: int) -> AsyncIterator[list[StreamRecord]]:
        """Batches of records from ``start`` on, in order and without gaps, waiting for new ones at the end (a
        long poll on the last add confirmed). Raises PositionTruncated if retention or truncation overtakes the
        reader: ledgers may vanish from under it, and only the sequence numbers tell whether they held records
        (a writer's open drops an empty ledger) or not."""
        # Decided now, not when the iteration starts: a writer opening meanwhile drops the empty ledger at the end.
        expected = self.next_sequence if start >= self.next_position() else None  # the next record's sequence
        return self._tail(start, max_records, expected)

    async def _tail(self, start: StreamPosition, max_records: int,
                    expected: int | None) -> AsyncIterator[list[StreamRecord]]:
        position = start
        jumped = False
        while True:
            self._check_open()
            ml = self.ml
            point = self.truncated_before
            if point is not None and position < point:
                raise StreamApiError("PositionTruncated", f"{self.ns}/{self.name}: the reader's position "
                                     f"{tuple(position)} was truncated (before {tuple(point)})")
            first = StreamPosition(*ml.first_position, 0)
            if position < first:
                position, jumped = first, True
            entry = ml.normalize(position.entry)
            if entry != position.entry:
                position = StreamPosition(*entry, 0)
            if entry >= ml.next_position:
                await self._wait(ml, entry)
                continue
            wanted = [entry]
            while len(wanted) < max_records:
                after = ml.position_after(wanted[-1])
                if after >= ml.next_position:
                    break
                wanted.append(after)
            entries = await self._read(wanted)
            if [e.position for e in entries[:1]] != [entry]:
                continue  # removed between the check and the read: the checks above decide
            batch: list[StreamRecord] = []
            size = 0
            for e in entries:
                records = record_set.decode(e.data)
                first_slot = position.slot if e.position == entry else 0
                for slot in range(first_slot, len(records.records)):
                    batch.append(StreamRecord(StreamPosition(e.position.ledger_id, e.position.entry_id, slot),
                                              records.first_sequence + slot, records.records[slot],
                                              records.publish_time_ms))
                size += len(e.data)
                position = StreamPosition(*ml.position_after(e.position), 0)
                if size >= MAX_BATCH_BYTES or len(batch) >= max_records:
                    break
            if batch:
                if jumped and batch[0].sequence != expected:
                    lost = f"{expected}..{batch[0].sequence - 1}" if expected is not None else f"before {batch[0].sequence}"
                    raise StreamApiError("PositionTruncated", f"{self.ns}/{self.name}: records {lost} were deleted by "
                                         "retention before this reader got them")
                jumped, expected = False, batch[-1].sequence + 1
                yield batch

    async def _wait(self, ml: ManagedLedger, entry: Position) -> None:
        try:
            await asyncio.wait_for(ml.wait_for_entries(entry), TAIL_POLL_S)
        except asyncio.TimeoutError:
            pass  # a period, not synchronisation: the loop re-checks the stream is still served here
        except ManagedLedgerError:
            if self.ml is ml:  # not replaced by a new writer's: the stream was unloaded or moved
                self._check_open()
                raise StreamApiError("StreamUnavailable", f"{self.ns}/{self.name} moved to another broker")

    # ---- info and lifecycle -------------------------------------------------------------

    async def info(self) -> dict:
        self._check_open()
        return {
            "first_position": self.first_readable(), "last_position": self.last_position,
            "next_position": self.next_position(), "first_sequence": await self.first_sequence(),
            "next_sequence": self.next_sequence, "size_bytes": self.ml.total_size,
            "ledgers": self.ml.ledgers_info(), "truncated_before": self.truncated_before,
            "writer_epoch": self.writer_epoch,
        }

    def _check_open(self) -> None:
        if self.closed:
            raise StreamApiError("StreamUnavailable", f"stream {self.ns}/{self.name} is no longer served here; look it up again")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.ml is not None:
            try:
                await self.ml.close()
            except StorageError as exc:
                log.warning("closing stream %s/%s: %s", self.ns, self.name, exc)

    async def delete(self) -> None:
        """Delete the stream's ledgers and documents."""
        self._check_open()
        self.closed = True
        try:
            await self.ml.delete()
            await self.ctx.store.delete(self.path)
        except NoNodeError:
            pass
        except StorageError as exc:
            raise unavailable(f"deleting {self.ns}/{self.name}", exc) from exc

