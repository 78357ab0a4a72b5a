"""Conditional metadata writes whose outcome survives a lost connection.

A managed ledger and its cursors change their nodes only by conditional writes;
a write that meets another version means another owner took over, and the
managed ledger fences itself. A write that fails with a lost connection
(ZooKeeper's ConnectionLoss) may have been applied all the same: taken as
failed, our own write would make the next one meet BadVersion, and a broker that
still owns the topic would fence it (nemesis seed 1, partition-broker).

So after a lost connection the node is read again, once the connection is back,
and the outcome decided from what is there (``unknown_write_outcome``):

* still at the version we expected: not applied, and nobody else wrote either,
  so the same conditional write is simply tried again;
* one version on *and* holding exactly our bytes *and* our bytes differ from what
  the node held before: applied -- adopt the new version. Bytes that change the
  node cannot have come from anyone else at that version: another owner taking
  over rewrites the node with what it read (the old bytes, or ours one version
  later), and a cursor's snapshot names a cursor ledger this writer just created;
* anything else is a conflict, handled as before (fence). That includes our write
  when it would not have changed the bytes: a new owner's restoring rewrite at the
  same version is indistinguishable from it, so a read-back alone proves nothing.
"""

from __future__ import annotations

import asyncio
import enum
import logging

from storage.errors import BadVersionError, MetadataConnectionError

log = logging.getLogger(__name__)


class WriteOutcome(enum.Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    CONFLICT = "conflict"


def unknown_write_outcome(expected_version: int, ours: bytes, previous: bytes | None,
                          current: bytes, current_version: int) -> WriteOutcome:
    """Decide what became of a conditional write of ``ours`` at ``expected_version`` whose answer was lost.

    ``previous`` is what the node held at ``expected_version`` (None when unknown); ``current`` and
    ``current_version`` are what it holds now.
    """
    if current_version == expected_version:
        return WriteOutcome.NOT_APPLIED
    if current_version == expected_version + 1 and current == ours and previous is not None and ours != previous:
        return WriteOutcome.APPLIED
    return WriteOutcome.CONFLICT


async def set_conditionally(store, path: str, data: bytes, expected_version: int, previous: bytes | None, *,
                            give_up_after_s: float = 30.0, retry_delay_s: float = 0.1):
    """``store.set(path, data, expected_version)``, resolving a lost connection as described above.

    Returns the node's Stat after our write. Raises BadVersionError on a conflict (also when the outcome
    turned out to be another writer's), NoNodeError, or the MetadataConnectionError when the store stays
    unreachable for ``give_up_after_s`` (the outcome is then still unknown).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after_s
    while True:
        try:
            return await store.set(path, data, expected_version)
        except MetadataConnectionError as lost:
            first = lost
        while True:
            try:
                current, stat = await store.get(path)
                break
            except MetadataConnectionError:
                if loop.time() >= deadline:
                    raise first
                await asyncio.sleep(retry_delay_s)  # a retry pace while the store reconnects, not a synchronisation
        outcome = unknown_write_outcome(expected_version, data, previous, current, stat.version)
        log.warning("write of %s at version %d lost its connection: %s (now version %d)", path, expected_version,
                    outcome.value, stat.version)
        if outcome is WriteOutcome.APPLIED:
            return stat
        if outcome is WriteOutcome.CONFLICT:
            raise BadVersionError(f"{path} is at version {stat.version} after a write at {expected_version} "
                                  "whose answer was lost, with other contents") from first
        if loop.time() >= deadline:
            raise first
