"""An htpasswd file (Apache's format, Pulsar's ``basicAuthConf``): ``user:hash`` per line, and password checks.

Hash formats, by prefix, as ``htpasswd`` writes them:

* ``$2y$``/``$2b$``/``$2a$`` bcrypt (``htpasswd -B``): checked with the ``bcrypt`` package itself;
* ``$apr1$`` Apache's MD5-crypt (``htpasswd -m``, the default, and what the official Python client's test
  suite uses), ``$1$`` MD5-crypt, ``$5$``/``$6$`` SHA-crypt, and 13-character DES crypt (``htpasswd -d``):
  checked with passlib's implementations (passlib's own bcrypt backend is never used: passlib 1.7.4 breaks
  with bcrypt 5);
* ``{SHA}`` base64 SHA-1 (``htpasswd -s``).

Anything else on a line is refused when the file is loaded, so an operator hears of a line that could never
match instead of a user being refused later. Checks compare in constant time; a password longer than any
hash can use (bcrypt reads 72 bytes) is refused rather than truncated.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import warnings
from dataclasses import dataclass

import bcrypt

with warnings.catch_warnings():
    # passlib 1.7.4 imports the stdlib `crypt` module, deprecated since Python 3.11; it falls back to its own
    # implementations where `crypt` is gone.
    warnings.simplefilter("ignore", DeprecationWarning)
    from passlib.hash import apr_md5_crypt, des_crypt, md5_crypt, sha256_crypt, sha512_crypt

MAX_USER_BYTES = 255
MAX_PASSWORD_BYTES = 1024
BCRYPT_MAX_PASSWORD_BYTES = 72
_DES_CHARS = set("./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class HtpasswdError(ValueError):
    """The htpasswd file cannot be used (a configuration error); names the line, never its hash."""


@dataclass(frozen=True)
class Htpasswd:
    entries: dict[str, str]  # user -> hash

    @classmethod
    def parse(cls, text: str, source: str = "htpasswd") -> "Htpasswd":
        entries: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, hashed = line.partition(":")
            if not sep or not user or not hashed:
                raise HtpasswdError(f"{source} line {number}: expected user:hash")
            scheme = hash_scheme(hashed)
            if scheme is None:
                raise HtpasswdError(f"{source} line {number} (user {user!r}): unsupported hash format; "
                                    "use bcrypt ($2y$), apr1/MD5-crypt, SHA-crypt, DES crypt or {SHA}")
            if user in entries:
                raise HtpasswdError(f"{source} line {number}: user {user!r} appears twice")
            entries[user] = hashed
        return cls(entries)

    def check(self, user: str, password: str) -> bool:
        """True when ``user`` exists and ``password`` matches its hash. CPU-heavy for bcrypt: run it off the
        event loop."""
        hashed = self.entries.get(user)
        if hashed is None:
            return False
        return check_password(password, hashed)


def hash_scheme(hashed: str) -> str | None:
    """The scheme of an htpasswd hash, or None when it is not one this module checks."""
    if hashed[:4] in ("$2y$", "$2b$", "$2a$"):
        return "bcrypt"
    if hashed.startswith("$apr1$"):
        return "apr1"
    if hashed.startswith("$1$"):
        return "md5-crypt"
    if hashed.startswith("$5$"):
        return "sha256-crypt"
    if hashed.startswith("$6$"):
        return "sha512-crypt"
    if hashed.startswith("{SHA}"):
        return "sha1"
    if len(hashed) == 13 and set(hashed) <= _DES_CHARS:
        return "des-crypt"
    return None


_PASSLIB = {"apr1": apr_md5_crypt, "md5-crypt": md5_crypt, "sha256-crypt": sha256_crypt,
            "sha512-crypt": sha512_crypt, "des-crypt": des_crypt}


def check_password(password: str, hashed: str) -> bool:
    secret = password.encode("utf-8")
    if len(secret) > MAX_PASSWORD_BYTES:
        return False
    scheme = hash_scheme(hashed)
    if scheme == "bcrypt":
        if len(secret) > BCRYPT_MAX_PASSWORD_BYTES:
            return False  # bcrypt 5 refuses these rather than silently truncating; so do we
        try:
            return bcrypt.checkpw(secret, hashed.encode("ascii"))
        except ValueError:
            return False
    if scheme == "sha1":
        expected = base64.b64encode(hashlib.sha1(secret).digest()).decode("ascii")
        return hmac.compare_digest(expected, hashed[len("{SHA}"):])
    if scheme in _PASSLIB:
        try:
            return _PASSLIB[scheme].verify(secret, hashed)
        except ValueError:
            return False
    return False
