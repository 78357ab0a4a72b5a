"""The mark-delete rate: a consumer's acks take effect at once, their writes are bounded by the rate, the last
state is always written (when the rate allows, or on close), and a crash loses at most the unwritten acks."""

from __future__ import annotations

import asyncio
import math

import pytest

from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from storage.managed_ledger.mark_delete_rate import Bucket, admit
from storage.testing.waiting import wait_until_async

# ---- the decision, from a table ------------------------------------------------------------------------------


@pytest.mark.parametrize("bucket, now, rate, after, wait", [
    (None, 5.0, 0.0, None, 0.0),  # no limit: always now, no bucket kept
    (Bucket(0.0, 1.0), 1.0, 0.0, Bucket(0.0, 1.0), 0.0),
    (None, 5.0, 1.0, Bucket(0.0, 5.0), 0.0),  # an idle cursor writes its first ack at once
    (Bucket(0.0, 5.0), 5.0, 1.0, Bucket(0.0, 5.0), 1.0),  # then waits a whole period
    (Bucket(0.0, 5.0), 5.25, 1.0, Bucket(0.25, 5.25), 0.75),
    (Bucket(0.0, 5.0), 6.0, 1.0, Bucket(0.0, 6.0), 0.0),  # a period later: one more write
    (Bucket(0.0, 5.0), 100.0, 1.0, Bucket(0.0, 100.0), 0.0),  # idle long: holds one second's worth, no more
    (None, 0.0, 4.0, Bucket(3.0, 0.0), 0.0),  # 4/s: a burst of up to 4 writes
    (Bucket(0.5, 0.0), 0.0, 4.0, Bucket(0.5, 0.0), 0.125),
    (Bucket(0.0, 0.0), 100.0, 4.0, Bucket(3.0, 100.0), 0.0),
    (None, 0.0, 0.5, Bucket(0.0, 0.0), 0.0),  # below 1/s: still one write at once, then one each 2 s
    (Bucket(0.0, 0.0), 1.0, 0.5, Bucket(0.5, 1.0), 1.0),
    (Bucket(0.0, 10.0), 9.0, 1.0, Bucket(0.0, 9.0), 1.0),  # a clock that went back earns nothing
    (Bucket(0.0, 0.0), 1.0 - 1e-12, 1.0, Bucket(0.0, 1.0 - 1e-12), 0.0),  # a timer firing a rounding error early
])
def test_admit(bucket, now, rate, after, wait):
    got_bucket, got_wait = admit(bucket, now, rate)
    assert got_wait == pytest.approx(wait)
    if after is None:
        assert got_bucket is None
    else:
        assert got_bucket.tokens == pytest.approx(after.tokens, abs=1e-9) and got_bucket.at == pytest.approx(after.at)


def test_admit_never_lets_more_than_the_rate_through_over_time():
    """However often it is asked, writes over T seconds stay within rate x T plus the burst."""
    for rate in (0.5, 1.0, 3.0, 20.0):
        bucket, writes, now = None, 0, 0.0
        while now < 30.0:
            bucket, wait = admit(bucket, now, rate)
            writes += wait == 0
            now += 0.013
        assert writes <= math.ceil(rate * 30.0) + max(1.0, rate) + 1, (rate, writes)
        assert writes >= rate * 30.0 - 1, (rate, writes)


# ---- a cursor under the rate ---------------------------------------------------------------------------------

RATE = 2.0
RATED = ManagedLedgerConfig(mark_delete_rate_per_s=RATE)


async def _open(ledgers, name, config=RATED):
    factory = ManagedLedgerFactory(ledgers.store, await ledgers.client())
    return await factory.open(name, config)


def _picture(cursor) -> tuple:
    return cursor.mark_delete_position, cursor.individually_deleted_ranges, cursor.backlog


async def test_a_burst_of_acks_costs_a_bounded_number_of_writes_and_the_last_state_is_written(ledgers):
    await ledgers.start_bookies(3)
    ml = await _open(ledgers, "t/ns/persistent/md-burst")
    positions = [await ml.add_entry(b"%d" % i) for i in range(400)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    before = cursor._persistence.writes
    loop = asyncio.get_running_loop()
    started = loop.time()
    for p in positions[::2]:  # 200 acks, each answered at once
        await asyncio.wait_for(cursor.delete([p], throttle=True), 1)
    for p in positions[1:300:2]:
        await asyncio.wait_for(cursor.delete([p], throttle=True), 1)
    elapsed = loop.time() - started
    assert cursor.backlog == 50 and cursor.mark_delete_position == positions[300], "acks take effect at once"
    written_in_burst = cursor._persistence.writes - before
    assert written_in_burst <= max(1, RATE) + RATE * elapsed + 1, (written_in_burst, elapsed)
    assert cursor.deferred_acks >= 340
    assert cursor.persisted_mark_delete_position < cursor.mark_delete_position  # the rest is not written yet

    # No more acks: the latest state is written once the rate allows, without a close.
    expected = _picture(cursor)
    await wait_until_async(lambda: cursor.persisted_mark_delete_position == positions[300], 5,
                           "the put-off write of the latest state")
    assert cursor._persistence.writes - before <= written_in_burst + 1

    # A new owner (the old one never closed: a crash) restores exactly that state.
    restored = (await _open(ledgers, "t/ns/persistent/md-burst")).cursors["sub"]
    assert _picture(restored) == expected
    await ml.close()


async def test_a_crash_before_the_write_loses_only_the_unwritten_acks(ledgers):
    await ledgers.start_bookies(3)
    ml = await _open(ledgers, "t/ns/persistent/md-crash", ManagedLedgerConfig(mark_delete_rate_per_s=0.01))
    positions = [await ml.add_entry(b"%d" % i) for i in range(20)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[4], throttle=True)  # the token: written before it returns
    assert cursor.persisted_mark_delete_position == positions[4]
    await cursor.mark_delete(positions[9], throttle=True)  # put off for 100 s
    await cursor.delete([positions[12]], throttle=True)
    assert cursor.mark_delete_position == positions[9] and cursor.persisted_mark_delete_position == positions[4]

    restored = (await _open(ledgers, "t/ns/persistent/md-crash")).cursors["sub"]
    # Entries 5..19 come back: 5..9 and 12 were acknowledged but not written (at-least-once), nothing is lost.
    assert restored.mark_delete_position == positions[4] and restored.backlog == 15
    await ml.close()


async def test_close_writes_the_acks_the_rate_put_off(ledgers):
    await ledgers.start_bookies(3)
    ml = await _open(ledgers, "t/ns/persistent/md-close", ManagedLedgerConfig(mark_delete_rate_per_s=0.01))
    positions = [await ml.add_entry(b"%d" % i) for i in range(20)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[2], throttle=True)
    await cursor.mark_delete(positions[7], throttle=True)
    await cursor.delete([positions[10], positions[11]], throttle=True)
    expected = _picture(cursor)
    assert cursor.persisted_mark_delete_position == positions[2]
    await ml.close()
    restored = (await _open(ledgers, "t/ns/persistent/md-close")).cursors["sub"]
    assert _picture(restored) == expected


async def test_unthrottled_acks_are_written_before_they_return_and_trimming_waits_for_the_write(ledgers):
    await ledgers.start_bookies(3)
    config = ManagedLedgerConfig(mark_delete_rate_per_s=0.01, max_entries_per_ledger=5, min_ledger_rollover_time_s=0)
    ml = await _open(ledgers, "t/ns/persistent/md-trim", config)
    positions = [await ml.add_entry(b"%d" % i) for i in range(12)]
    first_ledger = positions[0].ledger_id
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await cursor.mark_delete(positions[0], throttle=True)  # uses the only token
    await cursor.mark_delete(positions[6], throttle=True)  # consumes the first ledger, in memory only
    await ml.trim()
    assert ml.info.ledgers[0].ledger_id == first_ledger, "a ledger an unwritten ack consumed is kept"
    await cursor.mark_delete(positions[7])  # an ack the caller needs durable: written now, whatever the rate
    assert cursor.persisted_mark_delete_position == positions[7]
    await ml.trim()
    assert ml.info.ledgers[0].ledger_id != first_ledger
    await ml.close()
