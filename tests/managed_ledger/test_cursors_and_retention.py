"""Durable cursors restored exactly, backlog, reset, and retention with crash-safe deletion."""

from __future__ import annotations

import pytest

from storage.errors import NoSuchLedgerError
from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory, Position
from storage.managed_ledger.factory import Hooks
from storage.testing.waiting import wait_until_async

SMALL = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_s=0, cursor_max_entries_per_ledger=3)


async def _open(ledgers, name, config=SMALL, **kw):
    client = await ledgers.client()
    factory = ManagedLedgerFactory(ledgers.store, client, **kw)
    return factory, await factory.open(name, config)


async def test_cursor_state_is_restored_exactly_after_a_crash(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/cursor")
    positions = [await ml.add_entry(b"%d" % i) for i in range(12)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[2], properties={"seq": 42})
    await cursor.delete([positions[5], positions[6], positions[9]])
    await cursor.delete_batch_indexes(positions[7], {0, 2}, batch_size=4)
    await cursor.delete([positions[4]])  # more writes than one cursor ledger holds (3): it rolls over
    # a new owner, with no close of the old one (a crash)
    _, ml2 = await _open(ledgers, "t/ns/persistent/cursor")
    restored = ml2.cursors["sub"]
    assert restored.mark_delete_position == positions[2]
    assert restored.properties == {"seq": 42}
    assert {p for p in positions if restored.is_deleted(p)} == set(positions[:3]) | {positions[4], positions[5], positions[6], positions[9]}
    assert restored.batch_deleted_indexes(positions[7]) == frozenset({0, 2})
    assert restored.backlog == 12 - 7
    assert [e.position for e in await restored.read_entries(3)] == [positions[3], positions[7], positions[8]]


async def test_contiguous_individual_acks_collapse_into_mark_delete(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/collapse")
    positions = [await ml.add_entry(b"%d" % i) for i in range(9)]  # crosses ledger boundaries
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.delete(positions[1:6])
    assert cursor.mark_delete_position < positions[0]
    await cursor.delete([positions[0]])
    assert cursor.mark_delete_position == positions[5]
    assert cursor.individually_deleted_ranges == []
    assert cursor.backlog == 3


async def test_reset_rewinds_and_forgets_acks(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/reset")
    positions = [await ml.add_entry(b"%d" % i) for i in range(6)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[4])
    await cursor.reset(positions[1])
    assert cursor.backlog == 5
    assert [e.data for e in await cursor.read_entries(10)] == [b"1", b"2", b"3", b"4", b"5"]


async def test_find_newest_matching_by_binary_search(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/find")
    positions = [await ml.add_entry(b"%03d" % i) for i in range(30)]
    reader = ml.new_non_durable_cursor()
    assert await reader.find_newest_matching(lambda e: int(e.data) < 17) == positions[16]
    assert await reader.find_newest_matching(lambda e: False) is None


async def test_consumed_ledgers_are_trimmed_and_deleted_from_the_bookies(ledgers):
    await ledgers.start_bookies(3)
    factory, ml = await _open(ledgers, "t/ns/persistent/trim")
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    first_ledger = positions[0].ledger_id
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[8])
    await ml.trim()
    assert first_ledger not in [i["ledger_id"] for i in ml.ledgers_info()]
    with pytest.raises(NoSuchLedgerError):
        await factory.client.open_ledger(first_ledger, recovery=False)
    assert [e.data for e in await cursor.read_entries(5)] == [b"9"]


async def test_a_ledger_is_trimmed_as_soon_as_the_cursors_have_consumed_all_of_it(ledgers):
    """No second retention pass needed: the rollover that closes a consumed ledger, or the ack that finishes a
    closed one, trims it at once."""
    await ledgers.start_bookies(3)
    now = [1000.0]
    config = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_s=0, max_ledger_rollover_time_s=60)
    factory, ml = await _open(ledgers, "t/ns/persistent/prompt-trim", config, clock=lambda: now[0])
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)

    def kept():
        return {i["ledger_id"] for i in ml.ledgers_info()}

    first = [await ml.add_entry(b"a%d" % i) for i in range(2)]
    await cursor.mark_delete(first[1])  # all of ledger A, but A is the current ledger: never trimmed
    await ml.trim()
    assert first[0].ledger_id in kept()
    now[0] += 61
    await ml.trim()  # the retention pass finds A over age and starts a rollover, which closes A
    await wait_until_async(lambda: first[0].ledger_id not in kept(), 10, "the rollover to trim the consumed ledger A")

    second = [await ml.add_entry(b"b%d" % i) for i in range(5)]  # ledger B takes four, C the fifth
    await cursor.mark_delete(second[2])  # B still has one unconsumed entry
    await factory.settle()
    assert second[0].ledger_id in kept()
    await cursor.mark_delete(second[3])  # B's last entry: the mark-delete stays on B, which is now all consumed
    await wait_until_async(lambda: second[0].ledger_id not in kept(), 10, "the ack that finished ledger B to trim it")
    assert [e.data for e in await cursor.read_entries(5)] == [b"b4"]


async def test_retention_by_size_keeps_consumed_ledgers(ledgers):
    await ledgers.start_bookies(3)
    keep = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_s=0, retention_size_mb=1, retention_time_s=-1)
    _, ml = await _open(ledgers, "t/ns/persistent/retain", keep)
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[9])
    await ml.trim()
    assert positions[0].ledger_id in [i["ledger_id"] for i in ml.ledgers_info()]  # 1 MB of retention holds them


async def test_retention_by_time_uses_the_injected_clock(ledgers):
    await ledgers.start_bookies(3)
    now = [1000.0]
    keep = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_s=0, retention_time_s=60,
                               retention_size_mb=-1)
    _, ml = await _open(ledgers, "t/ns/persistent/retain-time", keep, clock=lambda: now[0])
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[9])
    await ml.trim()
    assert positions[0].ledger_id in [i["ledger_id"] for i in ml.ledgers_info()]
    now[0] += 61
    await ml.trim()
    assert positions[0].ledger_id not in [i["ledger_id"] for i in ml.ledgers_info()]


class CrashBeforeDelete(Hooks):
    def __init__(self):
        self.armed = True

    async def before_delete_ledger(self, ml, ledger_id):
        if self.armed:
            raise RuntimeError("crash between the two deletion steps")


async def test_a_crash_between_list_update_and_deletion_is_finished_on_open(ledgers):
    await ledgers.start_bookies(3)
    hooks = CrashBeforeDelete()
    factory, ml = await _open(ledgers, "t/ns/persistent/crash", hooks=hooks)
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    doomed = positions[0].ledger_id
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[9])
    with pytest.raises(RuntimeError):
        await ml.trim()
    assert doomed in ml.info.pending_deletion
    await factory.client.open_ledger(doomed, recovery=False)  # still there: the crash left it behind
    factory2, ml2 = await _open(ledgers, "t/ns/persistent/crash")
    assert ml2.info.pending_deletion == []
    with pytest.raises(NoSuchLedgerError):
        await factory2.client.open_ledger(doomed, recovery=False)


async def test_non_durable_cursor_does_not_hold_data(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/nondurable")
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    reader = ml.new_non_durable_cursor(start=None)
    await ml.trim()  # no durable cursor: everything but the current ledger may go
    assert ml.first_position > positions[0]
    entries = await reader.read_entries(100)
    assert entries and entries[0].position == ml.first_position
    assert Position(*entries[-1].position) == positions[-1]


async def test_one_acks_whole_entries_and_batch_indexes_are_applied_at_once_and_restored(ledgers):
    await ledgers.start_bookies(3)
    _, ml = await _open(ledgers, "t/ns/persistent/delete-many")
    positions = [await ml.add_entry(b"%d" % i) for i in range(8)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    done = cursor.delete_many([positions[1], positions[2]], [
        (positions[4], 0b0101, 4),   # two of four: kept as batch indexes
        (positions[5], 0b1111, 4),   # all four: the entry is acknowledged whole
        (Position(positions[0].ledger_id, 10**6), 0b1, 4),  # no such entry: ignored
    ])
    # The state changed before the write is durable (a redelivery decided meanwhile sees it).
    assert cursor.is_deleted(positions[1]) and cursor.is_deleted(positions[5]) and not cursor.is_deleted(positions[4])
    assert cursor.batch_deleted_indexes(positions[4]) == frozenset({0, 2})
    await done
    _, ml2 = await _open(ledgers, "t/ns/persistent/delete-many")
    restored = ml2.cursors["sub"]
    assert {p for p in positions if restored.is_deleted(p)} == {positions[1], positions[2], positions[5]}
    assert restored.batch_deleted_indexes(positions[4]) == frozenset({0, 2})
