"""Reading Magnetar topics in Spark: the streaming and the batch source of ``format("magnetar")``.

How a micro-batch works:

- The driver (Spark runs the stream reader in one long-lived Python process)
  asks the admin API for the topic-partitions and their last message ids:
  that is the batch's end offset. With ``maxMessagesPerTrigger`` it reads
  message ids ahead with a reader of its own to find where the limit falls.
- ``partitions(start, end)`` cuts each topic-partition's range at ledger ends
  and every ``maxEntriesPerPartition`` entries, after checking that retention
  has not deleted the start of the range (``failOnDataLoss``).
- ``read()`` runs on executors: a non-durable reader opens at the range's
  first entry and yields exactly the messages in (start, end], as Arrow
  record batches. The same range always yields the same rows, so a replay
  after a failure repeats the batch exactly.
- With ``Trigger.AvailableNow`` the driver notes each topic-partition's last
  message when the query starts and never plans past it, so the query ends.
- Spark's progress moves a durable subscription: when a batch has been
  committed, its end is acknowledged cumulatively on every topic-partition,
  so backlog and retention follow the query.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import json
import logging
from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from connectors.spark.admin import Admin, TopicMissing, matching_partitions, topic_partitions
from connectors.spark.offsets import (
    EARLIEST, Offset, after, decode_offsets, encode_offsets, lost_range, message_key, range_entries, split_range,
)
from connectors.spark.options import MagnetarOptionError, SourceOptions
from connectors.spark.rows import EntryColumns
from connectors.spark.schemas import ExpandedRows, ValueDecoder, expanded_arrow_schema
from connectors.spark.security import ClientSecurity
from magnetar.topic_name import split_topic

log = logging.getLogger("connectors.spark")

SCHEMA = ("key string, value binary, topic string, partition int, messageId binary, "
          "publishTime timestamp, eventTime timestamp, properties map<string,string>")


class MagnetarSourceError(RuntimeError):
    """The source cannot go on: a missing topic, lost data, a range that cannot be read."""


class DataLossError(MagnetarSourceError):
    pass


class RangePartition(InputPartition):
    """One task: the messages of ``topic_partition`` in (start, end]."""

    def __init__(self, topic_partition: str, start: str, end: str):
        super().__init__((topic_partition, start, end))
        self.topic_partition, self.start, self.end = topic_partition, start, end


# ---- executors: read one range ------------------------------------------------------------


def _arrow_schema():
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([("key", pa.string()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
                      ("messageId", pa.binary()), ("publishTime", ts), ("eventTime", ts),
                      ("properties", pa.map_(pa.string(), pa.string()))])


def _in_range(entry, start: Offset, end: Offset) -> tuple[int, int, bool]:
    """``(first, stop, done)``: the entry's messages in (start, end] are ``first`` to ``stop`` (exclusive);
    ``done`` when the range ends within this entry. Keys rise with the batch index within an entry."""
    indexes, n = entry.indexes, len(entry.indexes)
    lowest = message_key(entry.ledger_id, entry.entry_id, indexes[0])
    highest = message_key(entry.ledger_id, entry.entry_id, indexes[-1])
    if lowest > start.bound() and highest <= end.bound():  # all of it: every entry but those at the range's ends
        first, stop = 0, n
    else:
        keys = [message_key(entry.ledger_id, entry.entry_id, i) for i in indexes]
        first = bisect.bisect_right(keys, start.bound())
        stop = max(first, bisect.bisect_right(keys, end.bound()))
    done = stop < n or (stop > first and _last_of(entry, indexes[stop - 1], end))
    return first, stop, done


def _last_of(entry, batch_index: int, end: Offset) -> bool:
    """Is the message ``batch_index`` of ``entry`` the last message of the range ending at ``end``?"""
    if (entry.ledger_id, entry.entry_id) != (end.ledger, end.entry):
        return False
    if end.batch_index >= 0:
        return batch_index >= end.batch_index
    return batch_index < 0 or batch_index >= entry.batch_size - 1


# A record batch's values stay well inside Arrow's 2 GiB binary offsets (and a task's memory) whatever the
# message sizes: a batch ends at this many payload bytes even before ``chunk`` rows.
MAX_BATCH_BYTES = 64 << 20
# The reader's permits: messages the broker may push ahead of the task. Kept at what it was when a record batch was
# 2,000 rows, since a message may be up to 5 MiB; the record batch fills over several receives instead.
RECEIVER_QUEUE_MESSAGES = 2_000


def read_range(service_url: str, partition: RangePartition, poll_timeout_ms: int, chunk: int = 10_000,
               security: ClientSecurity = ClientSecurity(), value_schema: dict | None = None) -> Iterator:
    """The messages of one range as Arrow record batches of about ``chunk`` rows, from a non-durable reader on a
    private event loop. The reader hands over whole entries (``receive_entries``), turned into columns; with
    ``value_schema`` (expandSchema) the values become typed columns (connectors/spark/schemas.py)."""
    from magnetar import MessageId
    from magnetar.asyncio.client import AsyncClient
    from magnetar.errors import Timeout

    tp, start, end = partition.topic_partition, Offset(*map(int, partition.start.split(":"))), Offset(*map(int, partition.end.split(":")))
    topic, index = split_topic(tp)
    loop = asyncio.new_event_loop()
    client = None
    try:
        client = loop.run_until_complete(_async_client(AsyncClient, service_url, security))
        if value_schema is None:
            schema, new_rows = _arrow_schema(), lambda: EntryColumns(topic, index)
        else:
            schema = expanded_arrow_schema(value_schema)
            decoder = ValueDecoder(value_schema, lambda version: json.loads(
                loop.run_until_complete(client.get_schema_info(tp, version)).schema_bytes()))
            new_rows = lambda: ExpandedRows(topic, decoder)  # noqa: E731
        first = MessageId.earliest if start.is_earliest else MessageId(ledger_id=start.ledger, entry_id=start.entry)
        reader = loop.run_until_complete(client.create_reader(tp, first, start_message_id_inclusive=True,
                                                              receiver_queue_size=RECEIVER_QUEUE_MESSAGES))
        rows = new_rows()
        done = False
        while not done:
            try:
                entries = loop.run_until_complete(reader.consumer.receive_entries(chunk, poll_timeout_ms))
            except Timeout:
                raise MagnetarSourceError(
                    f"{tp}: no message within pollTimeoutMs={poll_timeout_ms} before the end of the range "
                    f"({partition.start}, {partition.end}]; was the topic deleted or trimmed while it was read?") from None
            for entry in entries:
                begin, stop, done = _in_range(entry, start, end)
                if stop > begin:
                    rows.add(entry, begin, stop)
                if done:
                    break
            if len(rows) >= chunk or rows.nbytes >= MAX_BATCH_BYTES or (done and len(rows)):
                yield rows.record_batch(schema)
                rows = new_rows()
    finally:
        if client is not None:
            loop.run_until_complete(client.close())
        loop.close()


async def _async_client(cls, service_url, security: ClientSecurity):
    return cls(service_url, operation_timeout_seconds=30, **security.client_options())


# ---- the driver: offsets, planning, commits ----------------------------------------------


class _Driver:
    """What the planning side holds between micro-batches: admin access, a client, subscriptions, scanners."""

    def __init__(self, options: SourceOptions, streaming: bool):
        self.o, self.streaming = options, streaming
        self.admin = Admin(options.admin_url, security=options.security)
        self._client = None
        self._consumers: dict[str, object] = {}
        self._committed: dict[str, Offset] = {}
        self._scanners: dict[str, _Scanner] = {}
        # Trigger.AvailableNow: the last message of each topic-partition when the query started; nothing
        # after it is read (partitions that appear later included), so the query ends.
        self.target: dict[str, Offset] | None = None

    @property
    def client(self):
        if self._client is None:
            import magnetar

            self._client = magnetar.Client(self.o.service_url, operation_timeout_seconds=30,
                                           **self.o.security.client_options())
        return self._client

    # topic-partitions and their ends

    def topic_partitions(self) -> list[str]:
        if self.o.pattern is not None:
            return matching_partitions(self.admin, self.o.namespace, self.o.pattern)
        out = []
        for topic in self.o.topics:
            parts = topic_partitions(self.admin, topic)
            if parts is None:
                if not self.o.wait_for_topic:
                    raise MagnetarSourceError(f"topic {topic} does not exist: create it first, or set the option "
                                              f"waitingForNonExistedTopic=true to wait for it")
                continue
            out.extend(parts)
        return out

    def last(self, tp: str) -> Offset:
        try:
            return self.admin.last_offset(tp)
        except TopicMissing:  # a partition nobody has written to yet
            return EARLIEST

    def resolve(self, spec, tps: list[str], option: str) -> dict[str, Offset]:
        if spec == "earliest":
            return {tp: EARLIEST for tp in tps}
        if spec == "latest":
            return {tp: self.last(tp) for tp in tps}
        unknown = sorted(set(spec) - set(tps))
        if unknown and not self.o.wait_for_topic:
            raise MagnetarOptionError(f"option {option!r} names {', '.join(unknown)}, which is not among the "
                                      f"topic-partitions read ({', '.join(tps) or 'none'})")
        return {tp: spec.get(tp, EARLIEST) for tp in set(tps) | set(spec)}

    def latest(self, start: dict[str, Offset], max_rows: int | None) -> dict[str, Offset]:
        ends = dict(start)
        for tp in self.topic_partitions():
            if self.target is not None and tp not in self.target:
                continue
            begin = start.get(tp, EARLIEST)
            last = self.last(tp)
            if self.target is not None and after(last, self.target[tp]):
                last = self.target[tp]
            ends[tp] = last if after(last, begin) else begin
            if self.streaming:
                self.subscription(tp)  # from the first batch on, the subscription holds what is not yet read
        if max_rows is not None:
            ends = self.admit(start, ends, max_rows)
        return ends

    def admit(self, start, ends, max_rows: int) -> dict[str, Offset]:
        """Admission control: at most ``max_rows`` messages in all, shared out over the backlogged partitions."""
        backlogged = [tp for tp in sorted(ends) if after(ends[tp], start.get(tp, EARLIEST))]
        limited = {tp: start.get(tp, EARLIEST) for tp in backlogged}
        budget, passes = max_rows, 0
        while budget > 0 and backlogged and passes < 2:
            share = max(1, budget // len(backlogged))
            for tp in list(backlogged):
                if budget <= 0:
                    break
                offset, count = self.scanner(tp).take(limited[tp], min(share, budget), ends[tp])
                limited[tp], budget = offset, budget - count
                if not after(ends[tp], offset):
                    backlogged.remove(tp)
            passes += 1
        return {**ends, **limited}

    def scanner(self, tp: str) -> "_Scanner":
        if tp not in self._scanners:
            self._scanners[tp] = _Scanner(self.client, tp, self.o.poll_timeout_ms)
        return self._scanners[tp]

    # planning

    def plan(self, start: dict[str, Offset], end: dict[str, Offset]) -> list[RangePartition]:
        ranges = []
        for tp in sorted(end):
            begin, stop = start.get(tp, EARLIEST), end[tp]
            if not after(stop, begin):
                continue
            ledgers, mark_delete = self.admin.ledgers_and_cursor(tp, self.o.subscription)
            lost = lost_range(begin, ledgers, mark_delete if self.streaming else None)
            if lost is not None:
                what = (f"data loss on {tp}: the messages after {lost[0].encode()} up to {lost[1].encode()} "
                        f"were deleted by retention before they were read")
                if self.o.fail_on_data_loss:
                    raise DataLossError(what + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipping them (failOnDataLoss=false)", what)
                begin = EARLIEST
            ranges.append((tp, begin, stop, ledgers))
        entries = sum(range_entries(begin, stop, ledgers) for _, begin, stop, ledgers in ranges)
        per_task = max(1, min(self.o.max_entries_per_partition, -(-entries // self.o.min_partitions)))
        return [RangePartition(tp, a.encode(), b.encode())
                for tp, begin, stop, ledgers in ranges for a, b in split_range(begin, stop, ledgers, per_task)]

    # commits

    def subscription(self, tp: str):
        if tp not in self._consumers:
            import magnetar

            self._consumers[tp] = self.client.subscribe(
                tp, self.o.subscription, consumer_type=magnetar.ConsumerType.Exclusive,
                initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=1)
        return self._consumers[tp]

    def commit(self, offsets: dict[str, Offset]) -> None:
        """Cumulatively acknowledge ``offsets`` on the durable subscription: Spark is done with everything up to them."""
        from magnetar import MessageId

        for tp, offset in sorted(offsets.items()):
            if offset.is_earliest or self._committed.get(tp) == offset:
                continue
            whole = offset.covers_whole_entry()
            mid = MessageId(ledger_id=offset.ledger, entry_id=offset.entry,
                            batch_index=-1 if whole else offset.batch_index, batch_size=0 if whole else offset.batch_size)
            self.subscription(tp).acknowledge_cumulative(mid)
            self._committed[tp] = offset

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class _Scanner:
    """Reads message ids ahead on the driver to find where a read limit falls (ids only, never kept as rows).

    ``ids`` holds every message id after ``origin``, in order, up to the last one read.
    """

    def __init__(self, client, tp: str, poll_timeout_ms: int):
        self.client, self.tp, self.poll_timeout_ms = client, tp, poll_timeout_ms
        self.reader = None
        self.origin: Offset | None = None
        self.ids: collections.deque[Offset] = collections.deque()

    def _restart(self, start: Offset) -> None:
        from magnetar import MessageId

        if self.reader is not None:
            self.reader.close()
        first = MessageId.earliest if start.is_earliest else MessageId(ledger_id=start.ledger, entry_id=start.entry)
        self.reader = self.client.create_reader(self.tp, first, start_message_id_inclusive=True)
        self.origin, self.ids = start, collections.deque()

    def take(self, start: Offset, n: int, end: Offset) -> tuple[Offset, int]:
        """The ``n``-th message after ``start`` (or ``end``, if fewer lie before it) and how many that covers."""
        from magnetar.errors import Timeout

        read_up_to = self.ids[-1] if self.ids else self.origin
        if self.reader is None or after(self.origin, start) or after(start, read_up_to):
            self._restart(start)
        while self.ids and not after(self.ids[0], start):
            self.ids.popleft()
        self.origin = start
        while len(self.ids) < n and (not self.ids or after(end, self.ids[-1])):
            try:
                msg = self.reader.read_next(self.poll_timeout_ms)
            except Timeout:
                raise MagnetarSourceError(f"{self.tp}: could not read ahead to {end.encode()} within "
                                          f"pollTimeoutMs={self.poll_timeout_ms}") from None
            mid = msg.message_id()
            offset = Offset(mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.batch_size())
            if after(offset, start):
                self.ids.append(offset)
        within = [o for o in list(self.ids)[:n] if not after(o, end)]
        if len(within) == n:
            return within[-1], n
        return end, len(within)


# ---- the Spark interfaces ---------------------------------------------------------------


class _Reading:
    """What the batch and stream readers share: the options, a lazily made driver, and ``read``."""

    streaming = False

    def __init__(self, options: SourceOptions, value_schema: dict | None = None):
        self.options = options
        self.value_schema = value_schema  # the topic's schema when expandSchema is on
        self._driver: _Driver | None = None

    def __getstate__(self):  # executors get the options, never the driver's connections
        return {"options": self.options, "value_schema": self.value_schema, "_driver": None}

    @property
    def driver(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(self.options, self.streaming)
        return self._driver

    def read(self, partition: RangePartition):
        return read_range(self.options.service_url, partition, self.options.poll_timeout_ms,
                          security=self.options.security, value_schema=self.value_schema)


class MagnetarBatchReader(_Reading, DataSourceReader):
    def partitions(self):
        tps = self.driver.topic_partitions()
        start = self.driver.resolve(self.options.starting, tps, "startingOffsets")
        end = self.driver.resolve(self.options.ending, tps, "endingOffsets")
        try:
            return self.driver.plan(start, end)
        finally:
            self.driver.close()


class MagnetarStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    streaming = True

    def initialOffset(self) -> dict:
        tps = self.driver.topic_partitions()
        return encode_offsets(self.driver.resolve(self.options.starting, tps, "startingOffsets"))

    def prepareForTriggerAvailableNow(self) -> None:
        self.driver.target = {tp: self.driver.last(tp) for tp in self.driver.topic_partitions()}

    def getDefaultReadLimit(self):
        n = self.options.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit=None) -> dict:
        begin = decode_offsets(start)
        # Spark plans one micro-batch at a time: the batch that ended at `start` is done, so commit it now
        # rather than only when the next batch with data is planned.
        self.driver.commit(begin)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return encode_offsets(self.driver.latest(begin, max_rows))

    def partitions(self, start: dict, end: dict):
        return self.driver.plan(decode_offsets(start), decode_offsets(end))

    def commit(self, end: dict) -> None:
        self.driver.commit(decode_offsets(end))

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
