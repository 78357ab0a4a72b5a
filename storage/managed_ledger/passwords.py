"""Ledger passwords for managed ledgers: derived per managed ledger from one cluster secret.

How this works
--------------
A bookie records the master key (a digest of the ledger password,
storage.ledger_metadata.master_key) of the first add or fence it sees for a
ledger and refuses any later add or fence that carries another key. With an
empty password the key is a public constant and anyone who can reach a bookie
port can fence any ledger. So every ledger a broker creates gets a password
derived from a secret only the brokers know:

    data ledger:   HMAC-SHA256(secret, "managed-ledger:"  + managed-ledger name)
    cursor ledger: HMAC-SHA256(secret, "managed-cursor:" + managed-ledger name + "/" + cursor name)

The same name always gives the same password, so any broker of the cluster
(a new owner after failover) can open and fence the previous owner's ledgers
without a password store. The secret comes from the broker setting
``managed_ledger_password_secret``; when that is unset it is generated once and
kept in the metadata store (``SECRET_PATH``), so every broker of a cluster
derives the same passwords. Ledgers made under an earlier secret (the
generated one before a secret was configured, or secrets listed in
``managed_ledger_password_previous_secrets``) still open: opening tries
each secret in turn. Ledger metadata keeps each ledger's password
(as BookKeeper's does), which is how autorecovery and ``bookie shell`` open
ledgers without knowing the secret.

Upgrade path: ledgers written before this existed carry the empty password in
their metadata. Opening tries the derived passwords, then the legacy empty one
(``open_with_password``), so old data still opens; new ledgers (rollover)
get derived passwords.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Callable

from storage.errors import ManagedLedgerConfigError, NodeExistsError, NoNodeError, WrongLedgerPasswordError

SECRET_PATH = "/magnetar/managed-ledger-password-secret"
SECRET_BYTES = 32
LEGACY_PASSWORD = b""  # what every ledger carried before passwords were derived


def derive_password(secret: bytes, context: str, name: str) -> bytes:
    """The password of the ledgers of ``name`` in ``context`` ("managed-ledger" or "managed-cursor")."""
    if not secret:
        raise ValueError("the ledger password secret must not be empty")
    return hmac.new(secret, f"{context}:{name}".encode(), hashlib.sha256).digest()


class LedgerPasswords:
    """Passwords for a factory's ledgers.

    ``secret=None`` keeps the legacy empty password (tests without a broker). ``previous`` are secrets
    ledgers may have been created under before the current one (a rotated or replaced secret): opening
    tries the current one, then each previous one, then the legacy empty password.
    """

    def __init__(self, secret: bytes | None, previous: tuple[bytes, ...] = ()):
        self._secret = secret
        self._previous = tuple(p for p in dict.fromkeys(previous) if p and p != secret)

    def data_ledger(self, ml_name: str) -> bytes:
        return self._derive(self._secret, "managed-ledger", ml_name)

    def cursor_ledger(self, ml_name: str, cursor_name: str) -> bytes:
        return self._derive(self._secret, "managed-cursor", f"{ml_name}/{cursor_name}")

    def accepted_data(self, ml_name: str) -> tuple[bytes, ...]:
        """What opening one of ``ml_name``'s data ledgers tries, in order."""
        return self._accepted("managed-ledger", ml_name)

    def accepted_cursor(self, ml_name: str, cursor_name: str) -> tuple[bytes, ...]:
        return self._accepted("managed-cursor", f"{ml_name}/{cursor_name}")

    def _accepted(self, context: str, name: str) -> tuple[bytes, ...]:
        tried = [self._derive(s, context, name) for s in (self._secret, *self._previous)]
        return tuple(dict.fromkeys([*tried, LEGACY_PASSWORD]))

    @staticmethod
    def _derive(secret: bytes | None, context: str, name: str) -> bytes:
        return derive_password(secret, context, name) if secret else LEGACY_PASSWORD


async def open_with_password(client, ledger_id: int, *, recovery: bool, passwords: tuple[bytes, ...]):
    """``client.open_ledger`` with the first of ``passwords`` its metadata accepts.

    Raises what open_ledger raises; WrongLedgerPasswordError when none matches.
    """
    for password in passwords[:-1]:
        try:
            return await client.open_ledger(ledger_id, recovery=recovery, password=password)
        except WrongLedgerPasswordError:
            continue
    return await client.open_ledger(ledger_id, recovery=recovery, password=passwords[-1])


def parse_secret(value: str) -> bytes:
    """A configured secret: ``file:///path`` (the file's bytes, surrounding whitespace stripped) or the text itself.

    Raises ValueError for an empty secret or an unreadable file.
    """
    if value.startswith("file://"):
        path = value[len("file://"):]
        try:
            with open(path, "rb") as f:
                secret = f.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the ledger password secret from {path}: {exc}") from exc
    else:
        secret = value.encode()
    if not secret:
        raise ValueError("the ledger password secret is empty")
    return secret


async def stored_secret(store) -> bytes | None:
    """The cluster's generated secret if a broker has made one (None otherwise)."""
    try:
        data, _ = await store.get(SECRET_PATH)
    except NoNodeError:
        return None
    return data or None


async def cluster_secret(store, token_bytes: Callable[[int], bytes] = secrets.token_bytes) -> bytes:
    """The cluster's generated secret from the metadata store, creating it if no broker has yet.

    Two brokers starting at once both try to create it; the loser reads the winner's.
    Raises ManagedLedgerConfigError if the node holds an empty secret, MetadataError.
    """
    try:
        data, _ = await store.get(SECRET_PATH)
    except NoNodeError:
        try:
            data = token_bytes(SECRET_BYTES)
            await store.create(SECRET_PATH, data, make_parents=True)
        except NodeExistsError:
            data, _ = await store.get(SECRET_PATH)
    if not data:
        raise ManagedLedgerConfigError(f"{SECRET_PATH} in the metadata store is empty; delete it or set "
                                       "managed_ledger_password_secret")
    return data
