"""The bookie cookie: proof at start-up that these directories belong to this bookie in this cluster.

A cookie names the cluster instance, the bookie id, its journal and ledger
dirs and its network location. It is written to a ``cookie`` file in each
dir and to ``/ledgers/cookies/<bookieId>``. At start the three copies and
the cookie this configuration expects must agree; otherwise the bookie
refuses to start, because serving from the wrong (or a wiped) directory
would silently lose entries that clients believe are replicated here.

``decide`` is the pure rule, table-tested; ``check_and_write_cookie`` does
the I/O around it. The network location alone may change (operators
re-label zones); the cookie is then rewritten everywhere.
"""

from __future__ import annotations

import enum
import json
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from storage.bookie.config import BookieConfig
from storage.bookie.journal import fsync_dir
from storage.errors import CookieMismatchError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore, paths

COOKIE_FILE = "cookie"
_IDENTITY = ("instance_id", "bookie_id", "journal_dir", "ledger_dir")


@dataclass(frozen=True)
class Cookie:
    instance_id: str
    bookie_id: str
    journal_dir: str
    ledger_dir: str
    network_location: str

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "Cookie":
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError) as exc:
            raise CookieMismatchError(f"cookie in {where} is unreadable ({exc}); refusing to start") from exc


class Decision(enum.Enum):
    OK = "ok"
    WRITE_NEW = "write-new"
    UPDATE_NETWORK_LOCATION = "update-network-location"


def _differences(found: Cookie, expected: Cookie, fields=_IDENTITY) -> list[str]:
    return [f"{f} is {getattr(found, f)!r}, expected {getattr(expected, f)!r}"
            for f in fields if getattr(found, f) != getattr(expected, f)]


def decide(journal: Cookie | None, ledger: Cookie | None, metadata: Cookie | None, expected: Cookie) -> Decision:
    """What to do at start-up given the three stored cookies. Raises CookieMismatchError saying what differs."""
    who = f"bookie {expected.bookie_id}"
    if journal is None and ledger is None and metadata is None:
        return Decision.WRITE_NEW
    if metadata is None:
        raise CookieMismatchError(
            f"{who}: the data dirs hold a cookie but the metadata store has none for this bookie: wrong "
            "--metadata-store, or the cluster metadata was re-created; refusing to start"
        )
    for name, found, path in (("journal", journal, expected.journal_dir), ("ledger", ledger, expected.ledger_dir)):
        if found is None:
            raise CookieMismatchError(
                f"{who}: {name} dir {path} has no cookie but the metadata store holds one (instance "
                f"{metadata.instance_id}, journal dir {metadata.journal_dir}, ledger dir {metadata.ledger_dir}): "
                "the data dir was wiped or --data-dir points at the wrong place; refusing to start"
            )
    if journal != ledger:
        raise CookieMismatchError(
            f"{who}: the journal and ledger dir cookies disagree ({'; '.join(_differences(journal, ledger, tuple(asdict(journal))))}); "
            "the dirs come from different bookies; refusing to start"
        )
    mismatch = _differences(journal, metadata, _IDENTITY)
    if mismatch:
        raise CookieMismatchError(f"{who}: dir cookie and metadata cookie differ: {'; '.join(mismatch)}; refusing to start")
    mismatch = _differences(journal, expected, _IDENTITY)
    if mismatch:
        raise CookieMismatchError(
            f"{who}: stored cookie does not match this configuration: {'; '.join(mismatch)}; refusing to start"
        )
    if journal.network_location != expected.network_location or metadata.network_location != expected.network_location:
        return Decision.UPDATE_NETWORK_LOCATION
    return Decision.OK


def _read_dir_cookie(directory: Path) -> Cookie | None:
    path = directory / COOKIE_FILE
    try:
        return Cookie.from_bytes(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None


def _write_dir_cookie(directory: Path, cookie: Cookie) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (COOKIE_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(cookie.to_bytes())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / COOKIE_FILE)
    fsync_dir(directory)


async def _instance_id(store: MetadataStore) -> str:
    try:
        return (await store.get(paths.INSTANCE_ID))[0].decode()
    except NoNodeError:
        pass
    await store.ensure_path(paths.LEDGERS_ROOT)
    try:
        await store.create(paths.INSTANCE_ID, uuid.uuid4().hex.encode())
    except NodeExistsError:  # another bookie initialised the cluster first
        pass
    return (await store.get(paths.INSTANCE_ID))[0].decode()


async def check_and_write_cookie(store: MetadataStore, config: BookieConfig) -> Cookie:
    """Verify (or create) the cookie in both dirs and the metadata store. Raises CookieMismatchError."""
    journal_dir, ledger_dir = Path(config.journal_dir).resolve(), Path(config.ledger_dir).resolve()
    expected = Cookie(await _instance_id(store), config.bookie_id, str(journal_dir), str(ledger_dir),
                      config.network_location)
    path = paths.cookie_path(config.bookie_id)
    try:
        data, stat = await store.get(path)
        metadata, version = Cookie.from_bytes(data, path), stat.version
    except NoNodeError:
        metadata, version = None, None
    decision = decide(_read_dir_cookie(journal_dir), _read_dir_cookie(ledger_dir), metadata, expected)
    if decision is Decision.OK:
        return expected
    cookie = replace(expected)
    if version is None:
        await store.ensure_path(paths.COOKIES)
        try:
            await store.create(path, cookie.to_bytes())
        except NodeExistsError as exc:
            raise CookieMismatchError(f"bookie {config.bookie_id}: another bookie registered this id's cookie "
                                      "at the same moment; refusing to start") from exc
    else:
        await store.set(path, cookie.to_bytes(), version)
    _write_dir_cookie(journal_dir, cookie)
    _write_dir_cookie(ledger_dir, cookie)
    return cookie
