"""TableView: the latest value of every key of a topic, kept up to date (the official client's TableView).

How it works: a non-durable reader with ``read_compacted`` starts at the
earliest message, so it first reads the topic's compacted view (one message
per key up to the compaction horizon) and then everything published after.
``load`` reads until the reader has nothing more available (the view is then
as complete as the topic was when it was created); after that a task follows
the topic. An empty value is a tombstone: it removes the key. Listeners see
every update, tombstones included (with the empty value), on the client's
event loop, in topic order. With a schema the reader declares it and values
are ``Message.value()`` (decoded against the writer's schema version).
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.errors import MagnetarError

log = logging.getLogger(__name__)


class AsyncTableView:
    def __init__(self, reader, schema=None):
        self._reader = reader
        self._schema = schema
        self._data: dict[str, object] = {}
        self._listeners: list = []
        self._task: asyncio.Task | None = None
        self.closed = False

    async def load(self) -> None:
        """Read what the topic holds now; then follow it in the background."""
        while await self._reader.has_message_available():
            self._apply(await self._reader.read_next())
        self._task = asyncio.get_running_loop().create_task(self._follow(), name=f"table view {self.topic()}")

    async def _follow(self) -> None:
        while not self.closed:
            try:
                msg = await self._reader.read_next()
            except asyncio.CancelledError:
                raise
            except MagnetarError as exc:
                if self.closed:
                    return
                log.warning("table view of %s: read failed: %s", self.topic(), exc)
                await asyncio.sleep(0.1)  # a failed read is retried; the reader reconnects on its own
                continue
            self._apply(msg)

    def _apply(self, msg) -> None:
        key = msg.partition_key()
        if not key:
            return  # a keyless message is no table row
        data = msg.data()
        if not data:
            self._data.pop(key, None)
            value = data
        else:
            value = msg.value() if self._schema is not None else data  # the reader decodes with the schema
            self._data[key] = value
        for listener in list(self._listeners):
            try:
                listener(key, value)
            except Exception:
                log.exception("table view of %s: a listener failed", self.topic())

    # ---- the official TableView's API ----------------------------------------------------

    def get(self, key: str):
        return self._data.get(key)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def items(self) -> list[tuple[str, object]]:
        return list(self._data.items())

    def for_each(self, action) -> None:
        for key, value in list(self._data.items()):
            action(key, value)

    def for_each_and_listen(self, action) -> None:
        """``action`` on every current entry, then on every update (in one step: no update falls between)."""
        self.for_each(action)
        self._listeners.append(action)

    def topic(self) -> str:
        return self._reader.topic()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, MagnetarError):
                pass
        await self._reader.close()
