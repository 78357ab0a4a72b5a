"""A conditional metadata write whose answer was lost (ConnectionLoss) must not fence a managed ledger that
still owns its nodes (nemesis seed 1, partition-broker), and must still fence it when another owner wrote."""

from __future__ import annotations

import asyncio

import pytest

from storage.errors import ManagedLedgerFencedError, MetadataConnectionError
from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from storage.managed_ledger.conditional_write import WriteOutcome, unknown_write_outcome

# one state per cursor ledger: every persisted state moves the cursor node to a new ledger (a conditional set)
SWITCHING = ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_rollover_time_s=0, cursor_max_entries_per_ledger=1)


@pytest.mark.parametrize("expected, ours, previous, current, version, outcome", [
    (4, b"new", b"old", b"old", 4, WriteOutcome.NOT_APPLIED),   # nobody wrote: try again
    (4, b"new", b"old", b"new", 5, WriteOutcome.APPLIED),       # ours, one version on
    (4, b"new", b"old", b"new", 6, WriteOutcome.CONFLICT),      # ours, then a new owner's restoring rewrite
    (4, b"new", b"old", b"old", 5, WriteOutcome.CONFLICT),      # a new owner rewrote the old bytes
    (4, b"new", b"old", b"other", 5, WriteOutcome.CONFLICT),    # another writer's change
    (4, b"same", b"same", b"same", 5, WriteOutcome.CONFLICT),   # a no-op of ours looks like a new owner's rewrite
    (4, b"new", None, b"new", 5, WriteOutcome.CONFLICT),        # what the node held is unknown: prove nothing
])
def test_outcome_of_a_write_whose_answer_was_lost(expected, ours, previous, current, version, outcome):
    assert unknown_write_outcome(expected, ours, previous, current, version) is outcome


class LosingAnswers:
    """The metadata store, except that the next ``set`` under a chosen path loses its answer: it is applied
    (or not) and then fails with MetadataConnectionError, as ZooKeeper's ConnectionLoss does."""

    def __init__(self, store):
        self._store = store
        self.path_part: str | None = None
        self.apply = True
        self.lost = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def arm(self, path_part: str, *, apply: bool) -> None:
        self.path_part, self.apply = path_part, apply

    async def set(self, path, data, expected_version=-1):
        if self.path_part is not None and self.path_part in path:
            self.path_part = None
            self.lost += 1
            if self.apply:
                await self._store.set(path, data, expected_version)
            raise MetadataConnectionError(f"set {path}: connection lost")
        return await self._store.set(path, data, expected_version)


async def _open(ledgers, name, store=None):
    factory = ManagedLedgerFactory(store or ledgers.store, await ledgers.client())
    return await factory.open(name, SWITCHING)


@pytest.mark.parametrize("apply", [True, False], ids=["applied", "not-applied"])
async def test_seed1_partition_broker_cursor_write_with_lost_answer_does_not_fence(ledgers, apply):
    await ledgers.start_bookies(3)
    store = LosingAnswers(ledgers.store)
    ml = await _open(ledgers, "t/ns/persistent/lost-answer", store)
    positions = [await ml.add_entry(b"m%d" % i) for i in range(6)]
    cursor = await ml.open_cursor("key-shared", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[0])
    store.arm("/key-shared", apply=apply)
    await cursor.mark_delete(positions[1])
    await cursor.mark_delete(positions[2])  # the next conditional write: BadVersion before the fix
    assert store.lost == 1
    await ml.add_entry(b"still the owner")
    reopened = await _open(ledgers, "t/ns/persistent/lost-answer")
    assert reopened.cursors["key-shared"].mark_delete_position == positions[2]


async def test_seed1_partition_broker_ledger_list_write_with_lost_answer_does_not_fence(ledgers):
    await ledgers.start_bookies(3)
    store = LosingAnswers(ledgers.store)
    ml = await _open(ledgers, "t/ns/persistent/lost-answer-list", store)
    store.arm("/lost-answer-list", apply=True)
    await asyncio.gather(*(ml.add_entry(b"m%d" % i) for i in range(12)))  # rollovers write the ledger list
    assert store.lost == 1
    await ml.add_entry(b"still the owner")
    reopened = await _open(ledgers, "t/ns/persistent/lost-answer-list")
    assert reopened.number_of_entries == 13


async def test_a_lost_answer_after_another_owner_took_over_still_fences(ledgers):
    await ledgers.start_bookies(3)
    store = LosingAnswers(ledgers.store)
    old = await _open(ledgers, "t/ns/persistent/lost-answer-fence", store)
    position = await old.add_entry(b"m")
    cursor = await old.open_cursor("sub", InitialPosition.EARLIEST)
    await _open(ledgers, "t/ns/persistent/lost-answer-fence")  # the new owner rewrites the cursor node
    store.arm("/sub", apply=False)
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.mark_delete(position)


async def test_a_background_cursor_write_that_fences_tells_the_owner(ledgers):
    """The topic learns of a fence met by a cursor's own write (no topic operation sees that error), so it can
    close itself rather than leave its dispatchers reading from a fenced managed ledger."""
    await ledgers.start_bookies(3)
    old = await _open(ledgers, "t/ns/persistent/fence-listener")
    position = await old.add_entry(b"m")
    cursor = await old.open_cursor("sub", InitialPosition.EARLIEST)
    heard: list[BaseException] = []
    old.fence_listeners.append(heard.append)
    await _open(ledgers, "t/ns/persistent/fence-listener")
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.mark_delete(position)
    assert len(heard) == 1
