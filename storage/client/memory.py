"""Ledgers in memory: an implementation of storage.client.api for tests that need no bookies.

``MemoryLedgerStore`` stands for the bookies and the ledger metadata; every
``MemoryLedgerClient`` opened on one store sees the same ledgers, as two
brokers on one cluster do, so fencing between owners can be tested. It keeps
the rules of the contract (tests/client/test_api_contract.py): adds are
acknowledged in order, a reader opened without recovery sees the LAC the
writer piggybacked on its last entry (so it lags by one, as on bookies),
recovery fences the writer, and errors are the real client's classes.

Adds are acknowledged at once (the future is resolved before
``add_entry_async`` returns; its callbacks still run on the next loop turn).
``MemoryLedgerStore.fail_next_adds`` is the scripted fault: the writer that
meets it stops with that error, as a real writer does when no bookie can
replace a failed one.

What changes state: a writer appends to and closes its own ledger; a
recovery open fences and closes it; ``delete_ledger`` removes it.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from storage.client.config import ClientConfig
from storage.digest import Entry
from storage.errors import (
    ClientClosedError, FrameTooLargeError, LedgerClosedError, LedgerFencedError,
    NoSuchEntryError, NoSuchLedgerError, StorageError, UnauthorizedError, WrongLedgerPasswordError,
)
from storage.ledger_metadata import validate_quorum


@dataclass
class _Ledger:
    ledger_id: int
    password: bytes
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    custom: dict
    payloads: list[bytes] = field(default_factory=list)
    piggybacked_lac: list[int] = field(default_factory=list)  # the writer's LAC when each entry was sent
    closed: bool = False
    fenced: bool = False
    last_entry_id: int = -1

    def lac_seen_by_readers(self) -> int:
        if self.closed:
            return self.last_entry_id
        return self.piggybacked_lac[-1] if self.piggybacked_lac else -1

    def length(self, upto: int) -> int:
        return sum(len(p) for p in self.payloads[:upto + 1])


class MemoryLedgerStore:
    """The ledgers every client of this store shares (the bookies and ledger metadata, in memory)."""

    def __init__(self):
        self.ledgers: dict[int, _Ledger] = {}
        self._next_id = 0
        self._add_faults: list[StorageError] = []

    def fail_next_adds(self, count: int, exc: StorageError) -> None:
        """The next ``count`` adds, to any ledger of this store, fail with (a copy of) ``exc``."""
        self._add_faults.extend([exc] * count)

    def _new_id(self) -> int:
        ledger_id, self._next_id = self._next_id, self._next_id + 1
        return ledger_id

    def _get(self, ledger_id: int) -> _Ledger:
        ledger = self.ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        return ledger


def _copy(exc: StorageError) -> StorageError:
    return type(exc)(*exc.args)


class MemoryReadHandle:
    """A ledger opened for reading (storage.client.api.ReadHandle)."""

    def __init__(self, store: MemoryLedgerStore, ledger: _Ledger, last_add_confirmed: int):
        self._store = store
        self._ledger = ledger
        self._lac = last_add_confirmed
        self._handle_closed = False

    @property
    def ledger_id(self) -> int:
        return self._ledger.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._ledger.last_entry_id if self._ledger.closed else self._lac

    @property
    def is_closed(self) -> bool:
        return self._ledger.closed

    @property
    def length(self) -> int:
        return self._ledger.length(self.last_add_confirmed)

    async def read_entries(self, first: int, last: int) -> list[Entry]:
        self._check_open()
        if first < 0 or last < first:
            raise ValueError(f"invalid entry range {first}..{last}")
        lac = self.last_add_confirmed
        if last > lac:
            raise NoSuchEntryError(f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed {lac}")
        ledger = self._store._get(self.ledger_id)
        return [Entry(ledger.ledger_id, e, ledger.piggybacked_lac[e], ledger.length(e), ledger.payloads[e])
                for e in range(first, last + 1)]

    async def read_entry(self, entry_id: int) -> Entry:
        return (await self.read_entries(entry_id, entry_id))[0]

    async def read_lac(self) -> int:
        self._check_open()
        self._lac = max(self._lac, self._ledger.lac_seen_by_readers())
        return self._lac

    def _check_open(self) -> None:
        if self._handle_closed:
            raise ClientClosedError(f"handle for ledger {self.ledger_id} is closed")

    async def close(self) -> None:
        self._handle_closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ledger={self.ledger_id}, lac={self._lac})"


class MemoryWriteHandle(MemoryReadHandle):
    """The single writer of a memory ledger (storage.client.api.WriteHandle)."""

    def __init__(self, store: MemoryLedgerStore, ledger: _Ledger, config: ClientConfig):
        super().__init__(store, ledger, -1)
        self._config = config
        self._failure: StorageError | None = None
        self._closing = False
        self._close_error: StorageError | None = None
        self._closed_once = False

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    def add_entry_async(self, payload: bytes) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self._failure is not None:
            fut.set_exception(_copy(self._failure))
            return fut
        if self._closing:
            fut.set_exception(LedgerClosedError(f"ledger {self.ledger_id}: handle is closed; no more adds"))
            return fut
        payload = bytes(payload)
        if len(payload) > self._config.max_entry_bytes:
            fut.set_exception(FrameTooLargeError(
                f"entry of {len(payload)} bytes exceeds max_entry_bytes {self._config.max_entry_bytes}"))
            return fut
        ledger = self._store.ledgers.get(self.ledger_id)
        if ledger is None:
            self._failure = NoSuchLedgerError(f"ledger {self.ledger_id} was deleted")
        elif ledger.fenced:
            self._failure = LedgerFencedError(f"ledger {self.ledger_id} is fenced: a recovery took it over")
        elif self._store._add_faults:
            self._failure = _copy(self._store._add_faults.pop(0))
        if self._failure is not None:
            fut.set_exception(_copy(self._failure))
            return fut
        ledger.payloads.append(payload)
        ledger.piggybacked_lac.append(self._lac)
        self._lac = len(ledger.payloads) - 1
        fut.set_result(self._lac)
        return fut

    async def add_entry(self, payload: bytes) -> int:
        return await self.add_entry_async(payload)

    async def close(self) -> None:
        if not self._closed_once:
            self._closed_once = True
            self._closing = True
            self._close_error = self._close_ledger()
            self._handle_closed = True
        if self._close_error is not None:
            raise _copy(self._close_error)

    def _close_ledger(self) -> StorageError | None:
        if isinstance(self._failure, (LedgerFencedError, NoSuchLedgerError, UnauthorizedError, ClientClosedError)):
            return self._failure
        ledger = self._store.ledgers.get(self.ledger_id)
        if ledger is None:
            return NoSuchLedgerError(f"ledger {self.ledger_id} was deleted before it was closed")
        if ledger.fenced:
            return LedgerFencedError(f"ledger {self.ledger_id} was recovered by another client; this writer's close does not count")
        ledger.closed, ledger.last_entry_id = True, self._lac
        return None

    def _abort(self, exc: StorageError) -> None:
        if self._failure is None:
            self._failure = exc
        self._closing = True


class MemoryLedgerClient:
    """storage.client.api.LedgerClient on a MemoryLedgerStore."""

    def __init__(self, store: MemoryLedgerStore | None = None, config: ClientConfig | None = None):
        self.store = store if store is not None else MemoryLedgerStore()
        self._config = (config or ClientConfig()).validate()
        self._closed = False
        self._handles: weakref.WeakSet[MemoryReadHandle] = weakref.WeakSet()  # closed with the client

    @classmethod
    async def open(cls, metadata_store=None, config: ClientConfig | None = None, **options) -> "MemoryLedgerClient":
        """A client on ``metadata_store`` when it is a MemoryLedgerStore, else on a new one."""
        return cls(metadata_store if isinstance(metadata_store, MemoryLedgerStore) else None, config)

    async def create_ledger(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                            password: bytes = b"", custom: dict | None = None,
                            min_zones: int | None = None) -> MemoryWriteHandle:
        self._check_open()
        validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)
        if min_zones is not None and min_zones < 1:  # one process has no zones; the argument is still checked
            raise ValueError(f"min_zones must be >= 1, got {min_zones}")
        ledger = _Ledger(self.store._new_id(), bytes(password), ensemble_size, write_quorum_size, ack_quorum_size,
                         dict(custom or {}))
        self.store.ledgers[ledger.ledger_id] = ledger
        handle = MemoryWriteHandle(self.store, ledger, self._config)
        self._handles.add(handle)
        return handle

    async def check_placement(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                              min_zones: int | None = None) -> None:
        self._check_open()
        validate_quorum(ensemble_size, write_quorum_size, ack_quorum_size)

    async def open_ledger(self, ledger_id: int, *, recovery: bool = True, password: bytes = b"") -> MemoryReadHandle:
        self._check_open()
        ledger = self.store._get(ledger_id)
        if ledger.password != bytes(password):
            raise WrongLedgerPasswordError(f"wrong password for ledger {ledger_id}")
        if recovery and not ledger.closed:
            # Every add here was acknowledged when it was made: the whole ledger is what recovery keeps.
            ledger.fenced, ledger.closed, ledger.last_entry_id = True, True, len(ledger.payloads) - 1
        handle = MemoryReadHandle(self.store, ledger, ledger.lac_seen_by_readers())
        self._handles.add(handle)
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        self._check_open()
        if self.store.ledgers.pop(ledger_id, None) is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")

    async def list_ledgers(self) -> list[int]:
        self._check_open()
        return sorted(self.store.ledgers)

    @property
    def bulk_add_paced_s(self) -> float:
        return 0.0  # adds never leave the process: nothing to pace

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the ledger client is closed")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in list(self._handles):
            if isinstance(handle, MemoryWriteHandle):
                handle._abort(ClientClosedError(f"ledger client closed while ledger {handle.ledger_id} was open"))
            await MemoryReadHandle.close(handle)
        self._handles.clear()

    async def __aenter__(self) -> "MemoryLedgerClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
