"""The asynchronous parts of one connection's commands, and the reasons its reading is paused (unanswered sends,
the broker-wide publish buffer: broker.server.limits)."""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError, PersistenceError, ServiceNotReadyError
from storage.errors import StorageError

log = logging.getLogger(__name__)
# Pulsar's maxPendingPublishRequestsPerConnection: stop reading the socket beyond this many unanswered sends.
MAX_PENDING_SENDS = 1000
PENDING_SENDS = "unanswered sends"


class CommandTasks:
    def __init__(self, conn):
        self.conn = conn
        self.pending_sends = 0
        self._paused_for: set[str] = set()  # why reading is paused (PENDING_SENDS, limits.PUBLISH_BUFFER)
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
        self.conn.service.publish_buffer.add(self.conn, nbytes)
        if self.pending_sends >= MAX_PENDING_SENDS:
            self.pause_reading(PENDING_SENDS)

    def send_finished(self, nbytes: int) -> None:
        self.pending_sends -= 1
        self.conn.service.publish_buffer.release(nbytes)
        if self.pending_sends <= MAX_PENDING_SENDS // 2:
            self.resume_reading(PENDING_SENDS)

    def pause_reading(self, reason: str) -> None:
        """Stop reading this connection's socket for ``reason``; it reads again once no reason is left."""
        if not self._paused_for and self.conn.transport is not None and not self.conn.closed:
            self.conn.transport.pause_reading()
        self._paused_for.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self._paused_for:
            return
        self._paused_for.discard(reason)
        if not self._paused_for and not self.conn.closed:
            self.conn.transport.resume_reading()
