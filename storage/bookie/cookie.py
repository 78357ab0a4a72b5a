"""The bookie cookie: proof at start-up that these directories belong to this bookie in this cluster.

A cookie names the cluster instance, the bookie id, its journal and ledger
dirs and its network location. It is written to a ``cookie`` file in each
dir and to ``/ledgers/cookies/<bookieId>``. At start the three copies and
the cookie this configuration expects must agree; otherwise the bookie
refuses to start, because serving from the wrong (or a wiped) directory
would silently lose entries that clients believe are replicated here.

``decide`` is the pure rule, table-tested; ``check_and_write_cookie`` does
the I/O around it. The cluster instance id (``/ledgers/INSTANCEID``, created
by the first bookie) is part of the cookie, so dirs from another cluster,
or a metadata store that was re-created, are told apart from this one.

Decision on changes: the network location alone may change (operators
re-label zones and upgrade domains; placement reads the registration, not
the cookie), and the cookie is then rewritten everywhere. Every other field
is identity -- a bookie id, a dir or an instance id that differs means the
data here is not the data the cluster thinks this bookie holds. BookKeeper
likewise lets only some fields be updated, and then only by an explicit
admin command; we accept the location change at start because a zone
re-label needs no data migration.
"""

from __future__ import annotations

import enum
import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from storage.bookie.config import BookieConfig
from storage.bookie.journal import fsync_dir
from storage.errors import BadVersionError, CookieMismatchError, NodeExistsError, NoNodeError
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
    WRITE_NEW = "write-new"  # stamp the dirs, then the metadata store
    UPDATE_NETWORK_LOCATION = "update-network-location"


def _differences(found: Cookie, expected: Cookie, fields=_IDENTITY) -> list[str]:
    return [f"{f} is {getattr(found, f)!r}, expected {getattr(expected, f)!r}"
            for f in fields if getattr(found, f) != getattr(expected, f)]


def decide(journal: Cookie | None, ledger: Cookie | None, metadata: Cookie | None, expected: Cookie) -> Decision:
    """What to do at start-up given the three stored cookies. Raises CookieMismatchError saying what differs.

    Cookies are written dirs first, metadata store last, so the only
    half-written state a crash can leave is "some dirs stamped, no metadata
    cookie": if the stamped dirs match this configuration exactly (same
    cluster instance id included) the first start is simply finished. A
    metadata cookie with an unstamped dir can only mean a wiped or wrong dir.
    """
    who = f"bookie {expected.bookie_id}"
    dirs = (("journal", journal, expected.journal_dir), ("ledger", ledger, expected.ledger_dir))
    if metadata is None:
        for name, found, path in dirs:
            mismatch = found and _differences(found, expected)
            if mismatch:
                raise CookieMismatchError(
                    f"{who}: {name} dir {path} holds a cookie ({'; '.join(mismatch)}) but the metadata store has "
                    "none for this bookie: wrong --metadata-store, the cluster metadata was re-created, or the "
                    "dir belongs to another bookie; refusing to start"
                )
        return Decision.WRITE_NEW
    for name, found, path in dirs:
        if found is None:
            raise CookieMismatchError(
                f"{who}: {name} dir {path} has no cookie but the metadata store has one for this bookie (instance "
                f"{metadata.instance_id}) written for journal dir {metadata.journal_dir} and ledger dir "
                f"{metadata.ledger_dir}: the data dir was wiped or --data-dir points at the wrong place; "
                "refusing to start"
            )
    mismatch = _differences(journal, ledger)
    if mismatch:
        raise CookieMismatchError(
            f"{who}: the journal and ledger dir cookies disagree ({'; '.join(mismatch)}); "
            "the dirs come from different bookies or clusters; refusing to start"
        )
    mismatch = _differences(journal, metadata)
    if mismatch:
        raise CookieMismatchError(
            f"{who}: the dir cookies and the metadata store's cookie differ: {'; '.join(mismatch)}; refusing to start"
        )
    mismatch = _differences(journal, expected)
    if mismatch:
        raise CookieMismatchError(
            f"{who}: the stored cookie does not match this configuration: {'; '.join(mismatch)}; refusing to start"
        )
    if {journal.network_location, ledger.network_location, metadata.network_location} != {expected.network_location}:
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
    """Verify (or create) the cookie in both dirs and the metadata store. Raises CookieMismatchError.

    The metadata write is conditional: ``create`` for a new cookie, ``set`` on
    the version read for an update, so two processes claiming one bookie id
    at once cannot both win.
    """
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
    # Dirs first, metadata last: see decide() for why this order is crash-safe.
    _write_dir_cookie(journal_dir, expected)
    _write_dir_cookie(ledger_dir, expected)
    try:
        if version is None:
            await store.ensure_path(paths.COOKIES)
            await store.create(path, expected.to_bytes())
        else:
            await store.set(path, expected.to_bytes(), version)
    except (NodeExistsError, BadVersionError) as exc:
        raise CookieMismatchError(
            f"bookie {config.bookie_id}: another process wrote this bookie id's cookie in the metadata store "
            "at the same moment (two bookies started with one id?); refusing to start"
        ) from exc
    return expected
