"""A topic's compaction: the compactor run, its status, and the published compacted view (horizon + ledger).

How a run works (what model.py decides, done here with I/O):

1. The horizon is the last entry stored when the run starts.
2. The input is the current compacted ledger (everything up to the previous
   horizon, already compacted) followed by the topic's entries after the
   previous horizon up to the new one -- so data ledgers trimmed since the
   last run are not needed again. Phase one reads the input and keeps key ->
   newest message id; phase two reads it again and writes what is kept to a
   new ledger.
3. Before phase two the new ledger's id is stored in the ``__compaction``
   cursor (``CompactionPendingLedger``), so a crash cannot leak it: the next
   load deletes a pending ledger that was never published.
4. The new ledger is closed (every entry durable, its length fixed), and only
   then does one cursor write move the mark-delete to the horizon *and* name
   the new ledger (``CompactedTopicLedger``) together. A crash before that
   write leaves the previous view whole; after it, the new one. The previous
   compacted ledger is deleted after the switch.

The ``__compaction`` cursor is durable, so it also holds the topic's ledgers
after the horizon from trimming, as in Pulsar. What may change the view:
``_publish`` only (the horizon and ledger change together, in memory after
the cursor write).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time

from broker.compaction import model
from broker.compaction.view import CompactedLedgerReader
from broker.errors import BrokerError, PersistenceError, persistence_errors
from storage.errors import NoNodeError, NoSuchLedgerError, StorageError
from storage.managed_ledger import InitialPosition, Position

log = logging.getLogger(__name__)

READ_BATCH = 100  # entries per read of the topic, and adds in flight to the compacted ledger


class CompactionStatus(enum.Enum):
    """Pulsar's LongRunningProcessStatus values."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionRunningError(BrokerError):
    """A compaction of this topic is already running (admin REST answers 409)."""

    http_status = 409


class TopicCompaction:
    def __init__(self, topic, *, clock=time.monotonic):
        self.topic = topic
        self.ml = topic.ml
        self.clock = clock
        self._failed_at: float | None = None
        self.horizon: Position | None = None
        self.reader: CompactedLedgerReader | None = None  # the published compacted ledger
        self.generation = 0  # moves on each publish: readers re-find their place in the new ledger
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.last_run: dict = {}
        self.phase = ""  # of the run in progress: "phase-one", "phase-two", "publishing"
        self._task: asyncio.Task | None = None
        self.retain_null_key = bool(getattr(topic.config, "topic_compaction_retain_null_key", False))

    # ---- state -------------------------------------------------------------

    @property
    def cursor(self):
        return self.ml.cursors.get(model.CURSOR_NAME)

    @property
    def ledger_id(self) -> int | None:
        return self.reader.ledger_id if self.reader is not None else None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def restore(self) -> None:
        """Load the published view from the ``__compaction`` cursor; delete a ledger a crashed run left behind."""
        cursor = self.cursor
        if cursor is None:
            return
        ledger_id = cursor.properties.get(model.COMPACTED_LEDGER)
        pending = cursor.properties.get(model.PENDING_LEDGER)
        if pending is not None and pending != ledger_id:
            log.info("topic %s: deleting compacted ledger %d of a run that did not finish", self.topic.name, pending)
            await self._delete_ledger(pending)
            with persistence_errors(f"forgetting the unfinished compaction of {self.topic.name}"):
                await cursor.mark_delete(cursor.mark_delete_position, properties=self._properties(ledger_id))
        if ledger_id is not None:
            with persistence_errors(f"opening the compacted ledger of {self.topic.name}"):
                self.reader = await CompactedLedgerReader.open(self.ml, ledger_id)
            self.horizon = cursor.mark_delete_position
            self.status = CompactionStatus.SUCCESS

    @staticmethod
    def _properties(ledger_id: int | None, pending: int | None = None) -> dict[str, int]:
        props = {}
        if ledger_id is not None:
            props[model.COMPACTED_LEDGER] = ledger_id
        if pending is not None:
            props[model.PENDING_LEDGER] = pending
        return props

    def status_json(self) -> dict:
        """Pulsar's LongRunningProcessStatus shape, plus what the last run did."""
        out = {"status": self.status.value, "lastError": self.last_error}
        if self.running:
            out["phase"] = self.phase
        if self.last_run:
            out["lastRun"] = dict(self.last_run)
        return out

    def stats(self) -> dict:
        return {
            "compactedLedgerId": self.ledger_id if self.ledger_id is not None else -1,
            "compactionHorizon": str(self.horizon) if self.horizon is not None else "",
            "status": self.status.value,
        }

    # ---- triggers ----------------------------------------------------------

    def trigger(self) -> asyncio.Task:
        """Start a run; CompactionRunningError when one is running."""
        if self.running:
            raise CompactionRunningError(f"compaction of {self.topic.name} is already running")
        self.status, self.last_error = CompactionStatus.RUNNING, ""
        self._task = self.topic.spawn(self._run())
        return self._task

    def threshold(self) -> int:
        value = getattr(self.topic.policies, "compaction_threshold", None)
        if value is None:
            value = getattr(self.topic.config, "broker_service_compaction_threshold_in_bytes", 0)
        return value

    def after_publish(self) -> None:
        """The automatic trigger, past the namespace's compaction threshold (bytes after the horizon). Checked on
        every publish: it costs a pass over the topic's ledger list (a few ledgers), no I/O."""
        threshold = self.threshold()
        if threshold <= 0 or self.running:
            return
        ledgers = [(i.ledger_id, i.entries, i.size) for i in self.ml.info.ledgers]
        since_failure = None if self._failed_at is None else self.clock() - self._failed_at
        if model.should_compact(model.backlog_bytes(ledgers, self.horizon), threshold, self.running, since_failure):
            log.info("topic %s passed its compaction threshold of %d bytes; compacting", self.topic.name, threshold)
            self.trigger()

    # ---- a run -------------------------------------------------------------

    async def _run(self) -> None:
        started = time.monotonic()
        try:
            self.phase = "phase-one"
            counts = await self._compact()
        except asyncio.CancelledError:
            self.status, self.last_error = CompactionStatus.ERROR, "cancelled (the topic closed)"
            raise
        except (BrokerError, StorageError) as exc:
            log.warning("compaction of %s failed: %s", self.topic.name, exc)
            self.status, self.last_error, self._failed_at = CompactionStatus.ERROR, str(exc), self.clock()
            return
        except Exception as exc:  # a bug must still end the run as ERROR, or the status says RUNNING forever
            log.exception("compaction of %s failed", self.topic.name)
            self.status, self.last_error = CompactionStatus.ERROR, f"{type(exc).__name__}: {exc}"
            self._failed_at = self.clock()
            return
        counts["seconds"] = round(time.monotonic() - started, 3)
        self.last_run = counts
        self.status, self._failed_at = CompactionStatus.SUCCESS, None

    async def _compact(self) -> dict:
        ml = self.ml
        horizon = ml.last_confirmed_entry
        previous = self.horizon
        if horizon.entry_id < 0 or (previous is not None and horizon <= previous):
            return {"messagesRead": 0, "entriesWritten": 0, "keys": 0}
        with persistence_errors(f"opening the compaction cursor of {self.topic.name}"):
            cursor = await ml.open_cursor(model.CURSOR_NAME, initial_position=InitialPosition.EARLIEST)
        source_reader, generation = self.reader, self.generation

        self.phase = "phase-one"
        latest: dict[str, model.MessageKey] = {}
        read = 0
        async for position, data in self._input(source_reader, previous, horizon):
            try:
                model.fold_latest(latest, position, model.keyed_messages(data))
            except Exception as exc:  # unreadable bytes: Pulsar skips such an entry too
                log.warning("compaction of %s skips unreadable entry %s: %s", self.topic.name, position, exc)
                continue
            read += 1

        c = ml.config
        with persistence_errors(f"creating the compacted ledger of {self.topic.name}"):
            handle = await ml.client.create_ledger(
                c.ensemble_size, c.write_quorum_size, c.ack_quorum_size, password=ml.password,
                custom={"managed-ledger": ml.name, "compacted-topic": "true"})
        published = False
        try:
            with persistence_errors(f"recording the compacted ledger of {self.topic.name}"):
                await cursor.mark_delete(cursor.mark_delete_position,
                                         properties=self._properties(self.ledger_id, handle.ledger_id))
            self.phase = "phase-two"
            written = await self._write(handle, source_reader, previous, horizon, latest)
            self.phase = "publishing"
            with persistence_errors(f"closing the compacted ledger of {self.topic.name}"):
                await handle.close()
            if self.generation != generation:
                raise PersistenceError(f"the compacted view of {self.topic.name} changed during the run")
            with persistence_errors(f"moving the compaction horizon of {self.topic.name}"):
                await cursor.mark_delete(horizon, properties=self._properties(handle.ledger_id))
            published = True
        finally:
            if not published:
                try:
                    await handle.close()
                except StorageError:
                    pass
                await self._delete_ledger(handle.ledger_id)
        reader = await CompactedLedgerReader.open(ml, handle.ledger_id)
        old = self._publish(horizon, reader)
        if old is not None:
            await old.close()
            await self._delete_ledger(old.ledger_id)
        return {"messagesRead": read, "entriesWritten": written, "keys": len(latest),
                "horizon": str(horizon), "compactedLedgerId": handle.ledger_id}

    def _publish(self, horizon: Position, reader: CompactedLedgerReader) -> CompactedLedgerReader | None:
        old, self.reader, self.horizon = self.reader, reader, horizon
        self.generation += 1
        return old

    async def _write(self, handle, source_reader, previous, horizon, latest) -> int:
        written, inflight = 0, []
        # Only entries holding some key's newest message are kept (and keyless ones, when those are): the others
        # need not even be parsed -- most of a topic with few keys.
        holders = None if self.retain_null_key else {position for position, _ in latest.values()}
        async for position, data in self._input(source_reader, previous, horizon):
            if holders is not None and position not in holders:
                continue
            try:
                out = model.compacted_entry(data, position, latest, self.retain_null_key)
            except Exception:
                continue  # skipped in phase one as well
            if out is None:
                continue
            inflight.append(handle.add_entry_async(model.encode_compacted_entry(position, out)))
            written += 1
            if len(inflight) >= READ_BATCH:
                with persistence_errors(f"writing the compacted ledger of {self.topic.name}"):
                    await asyncio.gather(*inflight)
                inflight = []
        with persistence_errors(f"writing the compacted ledger of {self.topic.name}"):
            await asyncio.gather(*inflight)
        return written

    async def _input(self, source_reader, previous: Position | None, horizon: Position):
        """(position, entry) of the previous compacted view, then of the topic after it up to ``horizon``."""
        if source_reader is not None:
            async for item in source_reader.scan():
                yield item
        cursor = self.ml.new_non_durable_cursor(start=previous, inclusive=False)
        try:
            while True:
                with persistence_errors(f"reading {self.topic.name} for compaction"):
                    entries = await cursor.read_entries(READ_BATCH)
                if not entries:
                    return
                for entry in entries:
                    if entry.position > horizon:
                        return
                    yield entry.position, entry.data
        finally:
            await cursor.close()

    async def _delete_ledger(self, ledger_id: int) -> None:
        try:
            await self.ml.client.delete_ledger(ledger_id)
        except (NoSuchLedgerError, NoNodeError):
            pass
        except StorageError as exc:
            log.warning("deleting compacted ledger %d of %s: %s", ledger_id, self.topic.name, exc)

    # ---- reads -------------------------------------------------------------

    async def last_message_id(self) -> tuple[Position, int] | None:
        """For a compacted reader when nothing was stored after the horizon: the last message of the compacted
        view (its tail may have been compacted away), as (position, batch index); ((-1, -1), -1) for an empty
        view; None when the topic's own last message id applies."""
        if self.horizon is None or self.reader is None or self.ml.last_confirmed_entry > self.horizon:
            return None
        with persistence_errors(f"reading the compacted ledger of {self.topic.name}"):
            last = await self.reader.last_entry()
        if last is None:
            return Position(-1, -1), -1
        position, data = last
        return position, model.last_batch_index(data)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.reader is not None:
            await self.reader.close()

    async def delete_ledgers(self) -> None:
        """The topic is being deleted: its compacted ledger (and one a run left pending) go with it. Call after
        ``close``; the managed ledger deletes the ``__compaction`` cursor itself."""
        cursor = self.cursor
        ids = {self.ledger_id}
        if cursor is not None:
            ids |= {cursor.properties.get(model.COMPACTED_LEDGER), cursor.properties.get(model.PENDING_LEDGER)}
        for ledger_id in ids - {None}:
            await self._delete_ledger(ledger_id)
        self.reader, self.horizon = None, None
