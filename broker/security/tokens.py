"""JSON Web Tokens as Pulsar makes and checks them: the keys, signing, and verification (on PyJWT).

Keys come in Pulsar's forms, so keys made by ``pulsar tokens`` work here and
the other way round:

* a secret key (HS256/384/512) is the raw key bytes (``create-secret-key
  --output`` writes them; ``--base64`` writes them base64-encoded, which is
  what a ``data:;base64,`` value carries);
* a public key is an X.509 SubjectPublicKeyInfo, a private key PKCS#8, each
  DER (what ``create-key-pair`` writes) or PEM;
* a key setting is ``file:///path``, ``data:[type][;base64],...``, a bare
  path to an existing file, or else the key itself in base64 (Pulsar's rule
  for a value that is neither ``file:`` nor ``data:``).

The signature algorithm follows the key: a secret key signs with HS256 (HS384,
HS512 for 48- and 64-byte keys, as Pulsar's JWT library chooses), an RSA key
with RS256 (or RS384/RS512 when asked), an EC key with the ES algorithm of its
curve. Verification accepts only that key's family, never ``none``.

Verification is a pure function of (token, key, claim, clock): ``exp`` and
``nbf`` are checked against the injected time, and the role is the claim
named by ``token_auth_claim`` (``sub`` by default).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from broker.errors import AuthenticationError

# PyJWT and cryptography are imported where a key or token is handled, not here: they cost ~0.1 s of CPU,
# and every broker process imports this module at start whether or not it checks tokens.

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
SIGNATURE_ALGORITHMS = HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS
_SECRET_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
MIN_SECRET_KEY_BYTES = 32
MAX_KEY_BYTES = 1 << 20  # a key file is a few KiB; refuse to read something that is clearly not one
MAX_TOKEN_BYTES = 64 * 1024  # a client-controlled quantity: tokens are a few hundred bytes, rarely a few KiB


class InvalidKeyError(ValueError):
    """A key setting cannot be read or is not a key of the expected kind (a configuration error)."""


# ---- reading keys ---------------------------------------------------------------------------------------


def read_key_bytes(setting: str) -> bytes:
    """The bytes a key setting names: ``file://``, ``data:``, a bare path, or base64 text. Raises InvalidKeyError."""
    setting = setting.strip()
    if setting.startswith("file:"):
        return _read_file(Path(urllib.parse.unquote(urllib.parse.urlparse(setting).path)))
    if setting.startswith("data:"):
        return _data_url(setting)
    path = Path(setting)
    if path.is_file():
        return _read_file(path)
    try:
        return base64.b64decode(setting, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidKeyError("key is neither file://, data:, an existing file, nor base64 text") from exc


def read_secret_key(setting: str) -> bytes:
    """A secret key setting's bytes; at least 32 (HS256's 256 bits: Pulsar's JWT library refuses shorter keys,
    and a path that does not exist must not pass as base64 text). Raises InvalidKeyError."""
    key = read_key_bytes(setting)
    if len(key) < MIN_SECRET_KEY_BYTES:
        raise InvalidKeyError(f"the secret key is {len(key)} bytes; HS256 needs at least {MIN_SECRET_KEY_BYTES} "
                              "(is the path right? `broker tokens create-secret-key` makes a key)")
    return key


def _read_file(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_KEY_BYTES:
            raise InvalidKeyError(f"{path} is larger than {MAX_KEY_BYTES} bytes: not a key")
        return path.read_bytes()
    except OSError as exc:
        raise InvalidKeyError(f"cannot read key file {path}: {exc.strerror or exc}") from exc


def _data_url(url: str) -> bytes:
    header, sep, body = url[len("data:"):].partition(",")
    if not sep:
        raise InvalidKeyError("data: key has no ',' before its content")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(urllib.parse.unquote(body), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidKeyError("data: key is not valid base64") from exc
    return urllib.parse.unquote_to_bytes(body)


def _is_pem(data: bytes) -> bool:
    return data.lstrip().startswith(b"-----BEGIN")


def load_public_key(data: bytes):
    """An RSA or EC public key from DER (X.509 SubjectPublicKeyInfo) or PEM bytes. Raises InvalidKeyError."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        key = (serialization.load_pem_public_key(data) if _is_pem(data)
               else serialization.load_der_public_key(data))
    except ValueError as exc:
        raise InvalidKeyError(f"not a DER or PEM public key: {exc}") from exc
    if not isinstance(key, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)):
        raise InvalidKeyError(f"unsupported public key type {type(key).__name__}: RSA or EC only")
    return key


def load_private_key(data: bytes):
    """An RSA or EC private key from DER (PKCS#8) or PEM bytes. Raises InvalidKeyError."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        key = (serialization.load_pem_private_key(data, password=None) if _is_pem(data)
               else serialization.load_der_private_key(data, password=None))
    except (ValueError, TypeError) as exc:
        raise InvalidKeyError(f"not an unencrypted DER or PEM private key: {exc}") from exc
    if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        raise InvalidKeyError(f"unsupported private key type {type(key).__name__}: RSA or EC only")
    return key


def algorithms_for(key) -> tuple[str, ...]:
    """The JWT algorithms a validation key accepts: its own family only."""
    if isinstance(key, bytes):
        return HMAC_ALGORITHMS
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(key, (rsa.RSAPublicKey, rsa.RSAPrivateKey)):
        return RSA_ALGORITHMS
    return (_ec_algorithm(key),)


def _ec_algorithm(key) -> str:
    for name, curve in _ec_curves().items():
        if isinstance(key.curve, curve):
            return name
    raise InvalidKeyError(f"unsupported EC curve {key.curve.name}: P-256, P-384 or P-521")


def _ec_curves() -> dict:
    from cryptography.hazmat.primitives.asymmetric import ec

    return {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}


def signing_algorithm(key, requested: str | None = None) -> str:
    """The algorithm a token signed with ``key`` uses: ``requested`` when it fits the key, else the key's own."""
    if isinstance(key, bytes):
        if requested in HMAC_ALGORITHMS and len(key) >= _SECRET_KEY_BYTES[requested]:
            return requested
        return "HS512" if len(key) >= 64 else "HS384" if len(key) >= 48 else "HS256"
    allowed = algorithms_for(key)
    return requested if requested in allowed else allowed[0]


# ---- making keys and tokens (the `broker tokens` CLI) -------------------------------------------------------


def create_secret_key(algorithm: str = "HS256") -> bytes:
    if algorithm not in HMAC_ALGORITHMS:
        raise InvalidKeyError(f"{algorithm} is not a secret-key algorithm ({', '.join(HMAC_ALGORITHMS)})")
    return secrets.token_bytes(_SECRET_KEY_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private PKCS#8 DER, public X.509 DER), as ``pulsar tokens create-key-pair`` writes them."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in EC_ALGORITHMS:
        private = ec.generate_private_key(_ec_curves()[algorithm]())
    else:
        raise InvalidKeyError(f"{algorithm} has no key pair ({', '.join(RSA_ALGORITHMS + EC_ALGORITHMS)})")
    return (
        private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
        private.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo),
    )


def create_token(key, subject: str, expires_at: float | None = None, algorithm: str | None = None,
                 headers: dict | None = None) -> str:
    """A signed token whose ``sub`` is ``subject`` (and ``exp`` ``expires_at``, epoch seconds, when given).
    ``key`` is the secret key's bytes or a private key object."""
    import jwt

    claims: dict = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = int(expires_at)
    return jwt.encode(claims, key, algorithm=signing_algorithm(key, algorithm), headers=headers)


# ---- verifying -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifiedToken:
    role: str
    expires_at: float | None  # epoch seconds; None = never
    claims: dict


def verify_token(token: str, key, role_claim: str = "sub", now: float | None = None) -> VerifiedToken:
    """Check ``token``'s signature with ``key`` (secret bytes or a public key) and its ``exp``/``nbf`` at ``now``.

    Raises AuthenticationError with what was wrong: missing, malformed, wrong signature or algorithm, expired,
    not yet valid, or without the role claim. The token itself never appears in a message."""
    if not token:
        raise AuthenticationError("missing token: the client sent no token")
    if len(token) > MAX_TOKEN_BYTES:
        raise AuthenticationError(f"token is longer than {MAX_TOKEN_BYTES} bytes")
    import jwt

    now = time.time() if now is None else now
    try:
        header = jwt.get_unverified_header(token)
    except jwt.DecodeError as exc:
        raise AuthenticationError(f"malformed token: {exc}") from None
    allowed = algorithms_for(key)
    if header.get("alg") not in allowed:
        raise AuthenticationError(f"token signed with {header.get('alg')!r}; the broker's key takes "
                                  f"{', '.join(allowed)}")
    try:
        # Time is checked below against the injected clock, not PyJWT's own.
        claims = jwt.decode(token, key, algorithms=list(allowed),
                            options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                                     "verify_aud": False, "require": []})
    except jwt.InvalidSignatureError:
        raise AuthenticationError("token signature does not match the broker's key (wrong signature)") from None
    except jwt.InvalidTokenError as exc:
        raise AuthenticationError(f"malformed token: {exc}") from None
    expires_at = _time_claim(claims, "exp")
    if expires_at is not None and now >= expires_at:
        raise AuthenticationError(f"token expired {now - expires_at:.0f} s ago")
    not_before = _time_claim(claims, "nbf")
    if not_before is not None and now < not_before:
        raise AuthenticationError(f"token not valid for another {not_before - now:.0f} s (nbf)")
    role = claims.get(role_claim)
    if not isinstance(role, str) or not role:
        raise AuthenticationError(f"token has no {role_claim!r} claim naming a role")
    return VerifiedToken(role, expires_at, claims)


def _time_claim(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AuthenticationError(f"token claim {name!r} is not a number of seconds")
    return float(value)


def unverified_parts(token: str) -> tuple[dict, dict]:
    """(header, claims) without checking anything, for ``broker tokens show``. Raises AuthenticationError."""
    import jwt

    try:
        return jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise AuthenticationError(f"malformed token: {exc}") from None
