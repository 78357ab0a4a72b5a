"""The under-replication records in the metadata store: marks, replication locks, auditor election.

Layout (BookKeeper's, so operators find it where they expect it)::

    /ledgers/underreplication/ledgers/<2>/<4>/urL<4>    one mark per under-replicated ledger (persistent)
    /ledgers/underreplication/locks/urL<10 digits>      a worker's claim on a ledger (ephemeral)
    /ledgers/underreplication/auditorelection/auditor   the elected auditor (ephemeral)

A mark's data is JSON ``{"missing": [bookie ids], "replace": [bookie ids],
"check": bool}``: bookies found gone, bookies an operator asked to move off
(decommission), and whether the entries on live bookies must be verified
(bit rot). A mark is added to by conditional writes and removed by a
conditional delete on the version the worker read when it started: if
anything was added meanwhile the delete fails and the ledger is looked at
again, so no report is ever lost.

A lock is ephemeral: a worker that dies releases its ledgers with its
session, and the next worker picks them up.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from storage.errors import BadVersionError, MetadataError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore, join, paths

log = logging.getLogger(__name__)

ROOT = paths.UNDER_REPLICATION
MARKS = f"{ROOT}/ledgers"
LOCKS = f"{ROOT}/locks"
ELECTION = f"{ROOT}/auditorelection"
AUDITOR = f"{ELECTION}/auditor"
_PREFIX = "urL"
_MAX_IDS = 10_000  # bound a mark's lists: a mark names bookies, never unbounded input


def mark_path(ledger_id: int) -> str:
    digits = f"{ledger_id:010d}"
    return f"{MARKS}/{digits[:2]}/{digits[2:6]}/{_PREFIX}{digits[6:]}"


def lock_path(ledger_id: int) -> str:
    return f"{LOCKS}/{_PREFIX}{ledger_id:010d}"


def ledger_id_from_mark(path: str) -> int:
    parts = path.rstrip("/").split("/")
    if len(parts) < 3 or not parts[-1].startswith(_PREFIX):
        raise ValueError(f"not an under-replication mark: {path!r}")
    return int(parts[-3] + parts[-2] + parts[-1][len(_PREFIX):])


@dataclass(frozen=True)
class Mark:
    """Why a ledger is under-replicated. Merging two marks keeps every reason."""

    missing: frozenset[str] = frozenset()
    replace: frozenset[str] = frozenset()
    check: bool = False

    def merge(self, other: "Mark") -> "Mark":
        return Mark(self.missing | other.missing, self.replace | other.replace, self.check or other.check)

    def to_bytes(self) -> bytes:
        return json.dumps({"missing": sorted(self.missing), "replace": sorted(self.replace), "check": self.check},
                          sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Mark":
        try:
            doc = json.loads(data) if data else {}
            missing = [str(b) for b in doc.get("missing", [])][:_MAX_IDS]
            replace = [str(b) for b in doc.get("replace", [])][:_MAX_IDS]
            return cls(frozenset(missing), frozenset(replace), bool(doc.get("check", False)))
        except (ValueError, TypeError, AttributeError):
            # A garbled mark still means "look at this ledger": check everything.
            return cls(check=True)


@dataclass
class Claim:
    """A worker's hold on one marked ledger: the mark as read, and its version."""

    ledger_id: int
    mark: Mark
    version: int
    released: bool = field(default=False)


class UnderReplication:
    """Marks, locks and listing over one metadata-store session."""

    def __init__(self, store: MetadataStore):
        self._store = store

    async def mark(self, ledger_id: int, mark: Mark) -> None:
        """Record (or add to) a ledger's mark. Conditional writes: concurrent markers merge."""
        path = mark_path(ledger_id)
        while True:
            try:
                data, stat = await self._store.get(path)
            except NoNodeError:
                try:
                    await self._store.create(path, mark.to_bytes(), make_parents=True)
                    return
                except (NodeExistsError, NoNodeError):  # raced with another marker, or with a prune
                    continue
            current = Mark.from_bytes(data)
            merged = current.merge(mark)
            if merged == current:
                return
            try:
                await self._store.set(path, merged.to_bytes(), stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    async def get(self, ledger_id: int) -> tuple[Mark, int] | None:
        try:
            data, stat = await self._store.get(mark_path(ledger_id))
        except NoNodeError:
            return None
        return Mark.from_bytes(data), stat.version

    async def list(self) -> list[int]:
        """Ids of every marked ledger, ascending."""
        out: list[int] = []
        for top in await self._children(MARKS):
            for mid in await self._children(join(MARKS, top)):
                for leaf in await self._children(join(join(MARKS, top), mid)):
                    try:
                        out.append(ledger_id_from_mark(f"{MARKS}/{top}/{mid}/{leaf}"))
                    except ValueError:
                        continue
        return sorted(out)

    async def is_locked(self, ledger_id: int) -> bool:
        return await self._store.exists(lock_path(ledger_id)) is not None

    async def claim(self, ledger_id: int, owner: str) -> Claim | None:
        """Lock a marked ledger for this session; None when it is locked elsewhere or no longer marked."""
        try:
            await self._store.create(lock_path(ledger_id), owner.encode(), ephemeral=True, make_parents=True)
        except NodeExistsError:
            return None
        found = await self.get(ledger_id)
        if found is None:
            await self.unlock(ledger_id)
            return None
        return Claim(ledger_id, found[0], found[1])

    async def unlock(self, ledger_id: int) -> None:
        try:
            await self._store.delete(lock_path(ledger_id))
        except NoNodeError:
            pass
        except MetadataError as exc:  # the lock is ephemeral: the session's end releases it anyway
            log.warning("could not release the replication lock of ledger %d: %s", ledger_id, exc)

    async def resolve(self, claim: Claim) -> bool:
        """The ledger is repaired as of the claimed mark: delete the mark unless it grew meanwhile.

        Returns True when the mark is gone; False when a newer report arrived
        (the ledger stays marked and is looked at again). Releases the lock.
        """
        try:
            await self._store.delete(mark_path(claim.ledger_id), claim.version)
            await self._prune(claim.ledger_id)
            return True
        except NoNodeError:
            return True
        except BadVersionError:
            return False
        finally:
            claim.released = True
            await self.unlock(claim.ledger_id)

    async def release(self, claim: Claim) -> None:
        """Give a claimed ledger back unrepaired (it stays marked)."""
        claim.released = True
        await self.unlock(claim.ledger_id)

    async def _prune(self, ledger_id: int) -> None:
        """Remove the now-empty hierarchy levels above a deleted mark (best effort)."""
        mid = mark_path(ledger_id).rsplit("/", 1)[0]
        for path in (mid, mid.rsplit("/", 1)[0]):
            try:
                await self._store.delete(path)
            except MetadataError:
                return  # not empty (another mark), or raced with a creator: leave it

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []
