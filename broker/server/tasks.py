"""The asynchronous parts of one connection's commands, and the reasons its reading is paused (unanswered sends,
unapplied acks, replies the client has not read, the broker-wide publish buffer: broker.server.limits)."""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError, PersistenceError, ServiceNotReadyError
from storage.errors import StorageError

log = logging.getLogger(__name__)
# Pulsar's maxPendingPublishRequestsPerConnection: stop reading the socket beyond this many unanswered sends.
MAX_PENDING_SENDS = 1000
PENDING_SENDS = "unanswered sends"
# Ours: and beyond one maximum-size message's worth of unanswered send bytes (max_message_size). The journal
# writes entries in arrival order, so every byte a connection has in flight is written before the next client's
# message: a producer pushing 5 MiB messages as fast as it can would otherwise put the whole broker-wide publish
# buffer (maxMessagePublishBufferSizeInMB) ahead of everyone else, seconds of disk time.
PENDING_SEND_BYTES = "unanswered send bytes"
# Ours, in the same spirit: beyond this many message ids in ACKs not yet applied, the connection's reading and
# the handling of frames already read wait. An ACK's work is the broker's CPU (and a cursor write); unbounded,
# a client flooding ACKs queues work ahead of every other client's on the one event loop. One full ACK group
# of the clients (ackGroupingMaxSize, 1,000 ids) may be in flight.
MAX_PENDING_ACK_IDS = 1000
PENDING_ACKS = "unapplied acks"
# Pulsar's pulsarChannelPauseReceivingRequestsIfUnwritable: replies not yet taken by the client are over the
# connection's high-water mark. As in Pulsar, the frames already read are still handled (at most one read's
# worth, so their replies are bounded too); holding them would bound a little tighter but also hold the ACKs
# and FLOWs of a client that is merely slow to read.
UNWRITABLE = "unsent replies over the high-water mark"


class CommandTasks:
    def __init__(self, conn):
        self.conn = conn
        self.pending_sends = 0
        self.pending_send_bytes = 0
        self.pending_ack_ids = 0
        self._paused_for: set[str] = set()  # why reading is paused (PENDING_SENDS, limits.PUBLISH_BUFFER)
        # The reasons that also hold frames already read (PENDING_ACKS; a topic's publish rate, which must not let
        # the hundreds of small SENDs one socket read can hold through after it is used up).
        self._holding: set[str] = set()
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro, request_id: int | None = None, *, close_when_not_ready: bool = False) -> asyncio.Task:
        """Run a command's async part; a BrokerError it raises becomes ERROR for ``request_id``.

        ``close_when_not_ready`` (PRODUCER, SUBSCRIBE): after a ServiceNotReady answer (the topic moved, e.g. its
        bundle was split or unloaded after the client's lookup) close the connection too. That is how Pulsar
        clients expect to hear it: they close the connection themselves on most ServiceNotReady errors, and
        pulsar-client 3.13 left on an open connection retries a first PRODUCER or SUBSCRIBE only when its
        operation timeout has passed (measured: a consumer that met one error on creation failed after the
        timeout). Closed, every producer and consumer of the connection looks its topic up again at once."""
        task = asyncio.get_running_loop().create_task(self._guarded(coro, request_id, close_when_not_ready))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _guarded(self, coro, request_id, close_when_not_ready: bool):
        conn = self.conn
        try:
            return await coro
        except asyncio.CancelledError:
            raise
        except BrokerError as exc:
            conn.budget.wasted()
            if request_id is not None:
                conn.out.error(request_id, exc)
            if close_when_not_ready and isinstance(exc, ServiceNotReadyError):
                log.info("%s: closing the connection after %s so its clients look their topics up again",
                         conn.remote_address, exc)
                conn.close()
        except StorageError as exc:
            if request_id is not None:
                conn.out.error(request_id, PersistenceError(str(exc)))
        except Exception as exc:  # a bug must not take the broker down; the client hears of it
            log.exception("%s: unexpected error", conn.remote_address)
            if request_id is not None:
                conn.out.error(request_id, BrokerError(f"{type(exc).__name__}: {exc}"))

    def send_started(self, nbytes: int) -> None:
        self.pending_sends += 1
        self.pending_send_bytes += nbytes
        self.conn.service.publish_buffer.add(self.conn, nbytes)
        if self.pending_sends >= MAX_PENDING_SENDS:
            self.pause_reading(PENDING_SENDS)
        if self.pending_send_bytes >= self.conn.config.max_message_size:
            self.pause_reading(PENDING_SEND_BYTES)

    def send_finished(self, nbytes: int) -> None:
        self.pending_sends -= 1
        self.pending_send_bytes -= nbytes
        self.conn.service.publish_buffer.release(nbytes)
        if self.pending_sends <= MAX_PENDING_SENDS // 2:
            self.resume_reading(PENDING_SENDS)
        if self.pending_send_bytes < self.conn.config.max_message_size // 2:
            self.resume_reading(PENDING_SEND_BYTES)

    def ack_started(self, ids: int) -> None:
        self.pending_ack_ids += ids
        if self.pending_ack_ids >= MAX_PENDING_ACK_IDS:
            self.pause_reading(PENDING_ACKS, hold_frames=True)

    def ack_finished(self, ids: int) -> None:
        self.pending_ack_ids -= ids
        if self.pending_ack_ids <= MAX_PENDING_ACK_IDS // 2:
            self.resume_reading(PENDING_ACKS)

    def unwritable(self) -> None:
        if self.conn.config.pulsar_channel_pause_receiving_requests_if_unwritable:
            self.pause_reading(UNWRITABLE)

    def writable(self) -> None:
        self.resume_reading(UNWRITABLE)

    @property
    def holding_frames(self) -> bool:
        """Frames already read wait too (the connection's next ACK, or next SEND, may be in them)."""
        return bool(self._holding)

    def pause_reading(self, reason: str, *, hold_frames: bool = False) -> None:
        """Stop reading this connection's socket for ``reason``; it reads again once no reason is left. With
        ``hold_frames`` the frames already read wait as well, and are handled once no such reason is left."""
        if not self._paused_for and self.conn.transport is not None and not self.conn.closed:
            self.conn.transport.pause_reading()
        self._paused_for.add(reason)
        if hold_frames:
            self._holding.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self._paused_for:
            return
        self._paused_for.discard(reason)
        if reason in self._holding:
            self._holding.discard(reason)
            if not self._holding and not self.conn.closed:
                asyncio.get_running_loop().call_soon(self.conn.handle_frames)  # the frames held meanwhile
        if not self._paused_for and not self.conn.closed:
            self.conn.transport.resume_reading()
