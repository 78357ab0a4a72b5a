"""Lifecycles of the managed ledger and the cursor: every legal transition, every illegal one, and the objects
following them (on in-memory ledgers: no bookie is needed to drive a state machine)."""

from __future__ import annotations

import itertools
import uuid

import pytest

from storage.client.memory import MemoryLedgerClient, MemoryLedgerStore
from storage.errors import ManagedLedgerClosedError, ManagedLedgerFencedError, ManagedLedgerStateError
from storage.managed_ledger import InitialPosition, ManagedLedgerFactory
from storage.managed_ledger.lifecycle import (
    ManagedCursorState, ManagedLedgerState, cursor_lifecycle, managed_ledger_lifecycle,
)
from storage.metadata import open_store

L, C = ManagedLedgerState, ManagedCursorState

# Written out, not read from the module: the test states what the design allows.
LEGAL_LEDGER = {
    (L.OPENING, L.OPEN), (L.OPENING, L.FENCED), (L.OPENING, L.CLOSED),
    (L.OPEN, L.FENCED), (L.OPEN, L.CLOSED),
    (L.FENCED, L.CLOSED),
    (L.CLOSED, L.DELETED),
}
LEGAL_CURSOR = {(C.OPEN, C.CLOSED), (C.CLOSED, C.DELETED)}


def _ledger_at(state: ManagedLedgerState):
    paths = {L.OPENING: [], L.OPEN: [L.OPEN], L.FENCED: [L.OPEN, L.FENCED], L.CLOSED: [L.CLOSED],
             L.DELETED: [L.CLOSED, L.DELETED]}
    lifecycle = managed_ledger_lifecycle("t/ns/persistent/x")
    for step in paths[state]:
        lifecycle.to(step)
    return lifecycle


def _cursor_at(state: ManagedCursorState):
    lifecycle = cursor_lifecycle("cursor c")
    for step in {C.OPEN: [], C.CLOSED: [C.CLOSED], C.DELETED: [C.CLOSED, C.DELETED]}[state]:
        lifecycle.to(step)
    return lifecycle


@pytest.mark.parametrize("old, new", sorted(LEGAL_LEDGER, key=str))
def test_legal_managed_ledger_transitions(old, new):
    lifecycle = _ledger_at(old)
    assert lifecycle.state is old and lifecycle.can(new)
    lifecycle.to(new)
    assert lifecycle.state is new


@pytest.mark.parametrize("old, new", [p for p in itertools.product(L, L) if p not in LEGAL_LEDGER])
def test_illegal_managed_ledger_transitions_raise_and_change_nothing(old, new):
    lifecycle = _ledger_at(old)
    assert not lifecycle.can(new)
    with pytest.raises(ManagedLedgerStateError, match=f"{old.value} -> {new.value}"):
        lifecycle.to(new)
    assert lifecycle.state is old


@pytest.mark.parametrize("old, new", list(itertools.product(C, C)))
def test_cursor_transitions(old, new):
    lifecycle = _cursor_at(old)
    if (old, new) in LEGAL_CURSOR:
        lifecycle.to(new)
        assert lifecycle.state is new
    else:
        with pytest.raises(ManagedLedgerStateError):
            lifecycle.to(new)
        assert lifecycle.state is old


@pytest.fixture
async def factories():
    store = await open_store(f"memory://lifecycle-{uuid.uuid4().hex[:12]}")
    ledgers = MemoryLedgerStore()
    made = []

    def new():
        factory = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers))
        made.append(factory)
        return factory

    yield new
    for factory in made:
        await factory.close()
    await store.close()


async def test_a_managed_ledger_goes_open_closed_deleted(factories):
    ml = await factories().open("t/ns/persistent/life")
    assert ml.state is L.OPEN
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    assert cursor.state is C.OPEN
    await ml.add_entry(b"x")
    await ml.close()
    assert ml.state is L.CLOSED and cursor.state is C.CLOSED
    with pytest.raises(ManagedLedgerClosedError, match="closed"):
        await ml.add_entry(b"late")
    await ml.close()  # idempotent
    ml.fence(RuntimeError("a cursor write the close waited for failed on version"))
    assert ml.state is L.CLOSED, "a fence after the close leaves it closed"
    await ml.delete()
    assert ml.state is L.DELETED and cursor.state is C.DELETED
    with pytest.raises(ManagedLedgerClosedError, match="deleted"):
        ml.check_open()
    await ml.delete()  # idempotent
    assert ml.state is L.DELETED


async def test_a_fenced_managed_ledger_can_only_be_closed(factories):
    old = await factories().open("t/ns/persistent/fenced")
    await factories().open("t/ns/persistent/fenced")  # a new owner
    with pytest.raises(ManagedLedgerFencedError):
        await old.add_entry(b"from the old owner")
    assert old.state is L.FENCED
    await old.close()
    assert old.state is L.CLOSED


async def test_a_deleted_cursor_stays_deleted(factories):
    ml = await factories().open("t/ns/persistent/cursor-life")
    cursor = await ml.open_cursor("sub")
    await ml.delete_cursor("sub")
    assert cursor.state is C.DELETED
    await cursor.close()
    await cursor.delete_persisted()
    assert cursor.state is C.DELETED
    with pytest.raises(ManagedLedgerClosedError):
        cursor.mark_delete(ml.last_confirmed_entry)
