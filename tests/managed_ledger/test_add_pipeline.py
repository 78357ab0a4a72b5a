"""The add pipeline: its pure rollover decisions from tables, and retries of failed adds on in-memory ledgers
(the writer's failure is scripted with MemoryLedgerStore.fail_next_adds; no bookie is needed)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from storage.client.memory import MemoryLedgerClient, MemoryLedgerStore
from storage.errors import NotEnoughBookiesError
from storage.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from storage.managed_ledger.add_pipeline import MAX_ADD_ATTEMPTS, full_when_pushed, should_roll
from storage.managed_ledger.metadata import LedgerInfo

MIB = 1024 * 1024
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=5, max_size_per_ledger_mb=1, min_ledger_rollover_time_s=10,
                             max_ledger_rollover_time_s=100)


@pytest.mark.parametrize("entries, size, age, expected", [
    (0, 0, 1000, False),       # an empty ledger never rolls, however old
    (5, 50, 10, True),         # full and old enough
    (5, 50, 9, False),         # full but younger than the minimum
    (1, MIB, 10, True),        # full by size
    (1, 10, 100, True),        # older than the maximum
    (1, 10, 99, False),
])
def test_should_roll(entries, size, age, expected):
    assert should_roll(LedgerInfo(1, entries, size, 1000.0), 1000.0 + age, CONFIG) is expected


@pytest.mark.parametrize("entries, size, inflight, inflight_bytes, age, expected", [
    (3, 30, 2, 20, 10, True),          # the adds in flight fill it
    (3, 30, 1, 10, 10, False),
    (3, 30, 2, 20, 9, False),          # too young to roll: it takes more
    (0, MIB - 10, 1, 10, 10, True),    # by size
    (0, MIB - 11, 1, 10, 10, False),
])
def test_full_when_pushed(entries, size, inflight, inflight_bytes, age, expected):
    ledger = LedgerInfo(1, entries, size, 1000.0)
    assert full_when_pushed(ledger, inflight, inflight_bytes, 1000.0 + age, CONFIG) is expected


@pytest.fixture
async def memory_ml():
    from storage.metadata import open_store

    store = await open_store(f"memory://pipeline-{uuid.uuid4().hex[:12]}")
    ledgers = MemoryLedgerStore()
    factory = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers))
    ml = await factory.open("t/ns/persistent/pipeline", ManagedLedgerConfig(min_ledger_rollover_time_s=0))
    yield ml, ledgers
    await factory.close()
    await store.close()


async def _payloads(ml):
    reader = ml.new_non_durable_cursor()
    out = [e.data for e in await reader.read_entries(100)]
    await reader.close()
    return out


async def test_a_failed_add_is_retried_on_a_new_ledger_in_order(memory_ml):
    ml, ledgers = memory_ml
    await ml.add_entry(b"before")
    first_ledger = ml.current_ledger_id
    ledgers.fail_next_adds(1, NotEnoughBookiesError("no bookie can replace the failed one"))
    positions = await asyncio.gather(*(ml.add_entry(b"e%d" % i) for i in range(5)))
    assert positions == sorted(positions)
    assert {p.ledger_id for p in positions} == {ml.current_ledger_id} and ml.current_ledger_id != first_ledger
    assert await _payloads(ml) == [b"before"] + [b"e%d" % i for i in range(5)]
    assert ml.number_of_entries == 6


async def test_an_add_fails_after_its_last_attempt(memory_ml):
    ml, ledgers = memory_ml
    ledgers.fail_next_adds(MAX_ADD_ATTEMPTS, NotEnoughBookiesError("no bookies"))
    with pytest.raises(NotEnoughBookiesError):
        await ml.add_entry(b"lost")
    assert await ml.add_entry(b"next") is not None  # the pipeline goes on with a new ledger
    assert await _payloads(ml) == [b"next"]
