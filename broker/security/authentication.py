"""Who is this client? The broker's authentication providers and the one service that picks between them.

Pulsar's model: a client names an authentication method (``auth_method_name``
in CONNECT: "token", "tls", "basic") and sends that method's data; the
provider of that name answers with a role or refuses. The providers:

* **token** — a JWT in ``auth_data`` (HTTP: ``Authorization: Bearer``), checked with ``token_secret_key``
  (HS256) or ``token_public_key`` (RS256, ES256); the role is its ``token_auth_claim``; it expires at ``exp``
  (broker/security/tokens.py);
* **tls** — the role is the CN of the client certificate the TLS handshake verified (the listener's context
  decides what is trusted; broker/security/tls.py builds it);
* **basic** — ``user:password`` in ``auth_data`` (HTTP: ``Authorization: Basic``), checked against the
  htpasswd file ``basic_auth_conf`` (broker/security/htpasswd.py); checks run off the event loop, a few at a
  time, since bcrypt is slow on purpose.

What happens when nothing fits, as in Pulsar: a client that presents no credentials, or names a method this
broker does not offer, gets ``anonymous_user_role`` when one is set (authorization then decides what that role
may do) and is refused otherwise. Credentials that *are* checked and fail are refused even when an anonymous
role exists: a wrong token is an error to hear about, not a quiet downgrade.

Every refusal is a broker.errors.AuthenticationError whose message says what was wrong (missing, wrong
signature, expired, unknown method, wrong password) and never contains the credential itself.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from broker.errors import AuthenticationError
from broker.security import tokens
from broker.security.htpasswd import MAX_PASSWORD_BYTES, MAX_USER_BYTES, Htpasswd, HtpasswdError

MAX_AUTH_DATA_BYTES = 64 * 1024  # bound on a client's auth_data (a token, user:password)
MAX_AUTH_METHOD_CHARS = 64
NO_METHOD = ("", "none")  # what a client without an authentication plugin sends
BASIC_CHECK_CONCURRENCY = 2  # bcrypt checks at once; more queue (each is ~0.1-0.3 s of CPU)
MAX_PENDING_BASIC_CHECKS = 256  # beyond this many queued checks a login is refused rather than queued


@dataclass(frozen=True)
class Authenticated:
    role: str
    method: str  # the provider that vouched for it; "anonymous" for the anonymous role
    expires_at: float | None = None  # epoch seconds when the credential stops being valid; None = never


class Provider(Protocol):
    name: str

    async def authenticate(self, data: bytes, ssl_object) -> Authenticated: ...


class TokenProvider:
    name = "token"

    def __init__(self, key, role_claim: str = "sub", clock: Callable[[], float] = time.time):
        import jwt  # noqa: F401 (tokens.py defers it; loaded here, at start, not at the first CONNECT on the loop)

        self.key = key
        self.role_claim = role_claim
        self.clock = clock

    @classmethod
    def from_settings(cls, secret_key: str | None, public_key: str | None, role_claim: str,
                      clock: Callable[[], float] = time.time) -> "TokenProvider":
        """The secret key wins when both are set, as in Pulsar. Raises ValueError (a configuration error)."""
        if secret_key:
            key = tokens.read_secret_key(secret_key)
        elif public_key:
            key = tokens.load_public_key(tokens.read_key_bytes(public_key))
        else:
            raise tokens.InvalidKeyError("the token provider needs token_secret_key or token_public_key")
        return cls(key, role_claim or "sub", clock)

    async def authenticate(self, data: bytes, ssl_object=None) -> Authenticated:
        return self.verify(_text(data, "token"))

    def verify(self, token: str) -> Authenticated:
        verified = tokens.verify_token(token.strip(), self.key, self.role_claim, now=self.clock())
        return Authenticated(verified.role, self.name, verified.expires_at)


class TlsProvider:
    name = "tls"

    async def authenticate(self, data: bytes, ssl_object) -> Authenticated:
        return Authenticated(role_from_certificate(ssl_object), self.name)


def role_from_certificate(ssl_object) -> str:
    """The CN of the peer certificate that ``ssl_object`` (an ssl.SSLObject/SSLSocket) verified.

    ``getpeercert()`` returns the subject only for a certificate the handshake verified against the trusted
    CAs; an unverified one (or none) reads as empty, so it never names a role."""
    if ssl_object is None:
        raise AuthenticationError("tls authentication needs a TLS connection (pulsar+ssl:// or https)")
    cert = ssl_object.getpeercert()
    if not cert:
        raise AuthenticationError("tls authentication: the client presented no trusted certificate")
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return value
    raise AuthenticationError("tls authentication: the client certificate has no CN (common name)")


class BasicProvider:
    name = "basic"

    def __init__(self, htpasswd: Htpasswd, max_pending: int = MAX_PENDING_BASIC_CHECKS,
                 concurrency: int = BASIC_CHECK_CONCURRENCY):
        self.htpasswd = htpasswd
        self.max_pending = max_pending
        self.pending = 0
        self._slots = asyncio.Semaphore(concurrency)

    @classmethod
    def from_setting(cls, setting: str) -> "BasicProvider":
        """``basic_auth_conf``: a path, ``file://`` or ``data:`` (Pulsar takes the file's text base64 too)."""
        raw = tokens.read_key_bytes(setting)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HtpasswdError("basic_auth_conf is not UTF-8 text") from exc
        return cls(Htpasswd.parse(text, source="basic_auth_conf"))

    async def authenticate(self, data: bytes, ssl_object=None) -> Authenticated:
        user, password = split_basic(_text(data, "basic credentials"))
        return await self.check(user, password)

    async def check(self, user: str, password: str) -> Authenticated:
        if self.pending >= self.max_pending:
            raise AuthenticationError(f"too many basic authentication checks in progress ({self.max_pending}); "
                                      "try again")
        self.pending += 1
        try:
            async with self._slots:
                ok = await asyncio.to_thread(self.htpasswd.check, user, password)
        finally:
            self.pending -= 1
        if not ok:
            raise AuthenticationError(f"basic authentication failed for user {user!r}: unknown user or wrong password")
        return Authenticated(user, self.name)


def split_basic(text: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise AuthenticationError("malformed basic credentials: expected user:password")
    if len(user.encode()) > MAX_USER_BYTES or len(password.encode()) > MAX_PASSWORD_BYTES:
        raise AuthenticationError(f"basic credentials too long (user <= {MAX_USER_BYTES}, "
                                  f"password <= {MAX_PASSWORD_BYTES} bytes)")
    return user, password


def _text(data: bytes, what: str) -> str:
    if not data:
        raise AuthenticationError(f"missing {what}: the client sent none")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"{what}: not UTF-8 text") from None


class AuthenticationService:
    """The providers ``authentication_providers`` names, plus the anonymous role. Built once per broker."""

    def __init__(self, enabled: bool, providers: dict[str, Provider], anonymous_role: str | None = None):
        self.enabled = enabled
        self.providers = providers
        self.anonymous_role = anonymous_role

    @classmethod
    def from_config(cls, config, clock: Callable[[], float] = time.time) -> "AuthenticationService":
        """Reads the keys and the htpasswd file now, so a bad setting stops the broker at start.
        Raises ValueError naming the setting."""
        if not config.authentication_enabled:
            return cls(False, {}, config.anonymous_user_role)
        providers: dict[str, Provider] = {}
        for name in config.authentication_providers:
            try:
                if name == "token":
                    providers[name] = TokenProvider.from_settings(config.token_secret_key, config.token_public_key,
                                                                  config.token_auth_claim, clock)
                elif name == "tls":
                    providers[name] = TlsProvider()
                elif name == "basic":
                    providers[name] = BasicProvider.from_setting(config.basic_auth_conf or "")
                else:
                    raise ValueError(f"unknown provider {name!r} (token, tls, basic)")
            except ValueError as exc:
                raise ValueError(f"authentication provider {name}: {exc}") from exc
        return cls(True, providers, config.anonymous_user_role)

    @property
    def methods(self) -> str:
        return ", ".join(self.providers) or "none"

    # ---- the binary protocol ------------------------------------------------------------------------------

    async def authenticate(self, method: str, data: bytes, ssl_object=None) -> Authenticated:
        """The role for CONNECT's ``auth_method_name``/``auth_data`` (or AUTH_RESPONSE's). Raises
        AuthenticationError. Only called with authentication enabled."""
        if len(method) > MAX_AUTH_METHOD_CHARS:
            raise AuthenticationError(f"auth_method_name is longer than {MAX_AUTH_METHOD_CHARS} characters")
        if len(data) > MAX_AUTH_DATA_BYTES:
            raise AuthenticationError(f"auth_data is {len(data)} bytes; the limit is {MAX_AUTH_DATA_BYTES}")
        provider = self.providers.get(method)
        if provider is not None:
            return await provider.authenticate(data, ssl_object)
        if method in NO_METHOD:
            return self.anonymous("the client sent no credentials")
        return self.anonymous(f"unknown authentication method {method!r}")

    def anonymous(self, why: str) -> Authenticated:
        if self.anonymous_role:
            return Authenticated(self.anonymous_role, "anonymous")
        raise AuthenticationError(f"{why}; this broker takes {self.methods} and has no anonymous role")

    # ---- HTTP ------------------------------------------------------------------------------------------------

    async def authenticate_http(self, authorization: str | None, ssl_object=None) -> Authenticated:
        """The role for an HTTP request's ``Authorization`` header (Bearer or Basic), else its client
        certificate when it came over https and the tls provider is on, else the anonymous role."""
        if authorization:
            if len(authorization) > MAX_AUTH_DATA_BYTES:
                raise AuthenticationError(f"Authorization header is longer than {MAX_AUTH_DATA_BYTES} bytes")
            scheme, _, value = authorization.strip().partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer":
                return await self._http_provider("token").authenticate(value.strip().encode(), ssl_object)
            if scheme == "basic":
                provider = self._http_provider("basic")
                try:
                    decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
                except (binascii.Error, ValueError):
                    raise AuthenticationError("malformed Basic Authorization header: not base64 of user:password") from None
                return await provider.check(*split_basic(decoded))
            raise AuthenticationError(f"unsupported Authorization scheme {scheme[:MAX_AUTH_METHOD_CHARS]!r}; "
                                      "use Bearer or Basic")
        if ssl_object is not None and "tls" in self.providers and ssl_object.getpeercert():
            return await self.providers["tls"].authenticate(b"", ssl_object)
        return self.anonymous("the request carries no credentials")

    def _http_provider(self, name: str):
        provider = self.providers.get(name)
        if provider is None:
            raise AuthenticationError(f"{name} authentication is not enabled on this broker (it takes {self.methods})")
        return provider
