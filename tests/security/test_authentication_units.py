"""Authentication without a broker: keys and tokens, htpasswd lines, the providers, the refresh decision.

The htpasswd lines come from independent tools where the machine has them (``openssl passwd`` writes the
apr1 line the official Python client's test suite uses, ``$apr1$`` for admin/123456, and MD5/SHA crypt);
bcrypt lines from the bcrypt package with htpasswd's ``$2y$`` prefix. TLS certificates are made by trustme
and the handshake runs in memory (ssl.MemoryBIO), so the tls provider reads a real verified peer certificate.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import ssl
import subprocess
from types import SimpleNamespace

import bcrypt
import jwt
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from broker.config import BrokerConfig
from broker.errors import AuthenticationError
from broker.security import tokens
from broker.security.authentication import (MAX_AUTH_DATA_BYTES, Authenticated, AuthenticationService, BasicProvider,
                                            TlsProvider, TokenProvider, role_from_certificate)
from broker.security.htpasswd import Htpasswd, HtpasswdError, check_password, des_crypt, hash_scheme
from broker.server.auth_handshake import RefreshAction, credentials_of, refresh_action
from broker.server.connection import ServerConnection
from broker.server.limits import ConnectionLimits, PublishBuffer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command
from tests.broker.test_connection_not_ready import RecordingTransport

T = pb.BaseCommand
NOW = 1_800_000_000.0
SECRET = b"k" * 32


def clock():
    return NOW


def openssl_passwd(*args: str) -> str:
    return subprocess.run(["openssl", "passwd", *args], check=True, capture_output=True, text=True).stdout.strip()


# ---- key settings ------------------------------------------------------------------------------------------


def test_key_settings_in_every_form_pulsar_takes(tmp_path):
    path = tmp_path / "secret.key"
    path.write_bytes(SECRET)
    b64 = base64.b64encode(SECRET).decode()
    for setting in (f"file://{path}", str(path), f"data:;base64,{b64}",
                    f"data:application/octet-stream;base64,{b64}", b64):
        assert tokens.read_key_bytes(setting) == SECRET, setting


@pytest.mark.parametrize("setting,message", [
    ("file:///nonexistent/secret.key", "cannot read key file"),
    ("data:;base64,@@@", "not valid base64"),
    ("data:no-comma", "no ','"),
    ("/not/a/file and not base64!", "neither"),
])
def test_unreadable_key_settings_say_why(setting, message):
    with pytest.raises(tokens.InvalidKeyError, match=message):
        tokens.read_key_bytes(setting)


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
@pytest.mark.parametrize("encoding", ["der", "pem"])
def test_public_keys_der_or_pem(algorithm, encoding):
    private_der, public_der = tokens.create_key_pair(algorithm)
    private = tokens.load_private_key(private_der)
    public = tokens.load_public_key(public_der)
    if encoding == "pem":
        public = tokens.load_public_key(public.public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))
    token = tokens.create_token(private, "alice")
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    assert tokens.verify_token(token, public).role == "alice"


def test_a_short_secret_key_is_refused_at_start(tmp_path):
    (tmp_path / "k").write_bytes(b"short")
    with pytest.raises(ValueError, match="at least 32"):
        TokenProvider.from_settings(str(tmp_path / "k"), None, "sub")


# ---- verifying tokens ---------------------------------------------------------------------------------------

OTHER_SECRET = b"o" * 32
RSA_PRIVATE = tokens.load_private_key(tokens.create_key_pair("RS256")[0])
RSA_PUBLIC = RSA_PRIVATE.public_key()


def _hs(claims, key=SECRET, alg="HS256"):
    return jwt.encode(claims, key, algorithm=alg)


def _rsa_public_pem() -> bytes:
    return RSA_PUBLIC.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _hs_raw(claims, key: bytes) -> str:
    """An HS256 token made by hand, with any bytes as the HMAC key (PyJWT refuses a PEM key, rightly)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(json.dumps(claims).encode())
    return signing_input + "." + b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())


VERIFY_ROWS = [
    # token, key, claim, error (substring) or role
    (_hs({"sub": "alice"}), SECRET, "sub", "alice"),
    (_hs({"sub": "alice", "exp": int(NOW) + 10}), SECRET, "sub", "alice"),
    (_hs({"sub": "alice", "role": "admin"}), SECRET, "role", "admin"),
    (_hs({"sub": "alice", "exp": int(NOW) - 5}), SECRET, "sub", AuthenticationError("expired")),
    (_hs({"sub": "alice", "exp": int(NOW)}), SECRET, "sub", AuthenticationError("expired")),
    (_hs({"sub": "alice", "nbf": int(NOW) + 60}), SECRET, "sub", AuthenticationError("not valid for another")),
    (_hs({"sub": "alice"}, OTHER_SECRET), SECRET, "sub", AuthenticationError("wrong signature")),
    (_hs({"role": "x"}), SECRET, "sub", AuthenticationError("no 'sub' claim")),
    (_hs({"sub": 7}), SECRET, "sub", AuthenticationError("Subject must be a string")),
    (_hs({"sub": "a", "role": 7}), SECRET, "role", AuthenticationError("no .role. claim")),
    (_hs({"sub": "a", "exp": "soon"}), SECRET, "sub", AuthenticationError("not a number")),
    ("", SECRET, "sub", AuthenticationError("missing token")),
    ("not.a.token", SECRET, "sub", AuthenticationError("malformed")),
    ("x" * (tokens.MAX_TOKEN_BYTES + 1), SECRET, "sub", AuthenticationError("longer than")),
    (jwt.encode({"sub": "alice"}, None, algorithm="none"), SECRET, "sub", AuthenticationError("'none'")),
    (tokens.create_token(RSA_PRIVATE, "alice"), RSA_PUBLIC, "sub", "alice"),
    (tokens.create_token(RSA_PRIVATE, "alice"), SECRET, "sub", AuthenticationError("RS256")),
    # algorithm confusion: an HS256 token "signed" with the RSA public key's PEM must not pass
    (_hs_raw({"sub": "mallory"}, _rsa_public_pem()), RSA_PUBLIC, "sub", AuthenticationError("'HS256'")),
]


@pytest.mark.parametrize("token,key,claim,expected", VERIFY_ROWS)
def test_verify_token(token, key, claim, expected):
    if isinstance(expected, AuthenticationError):
        with pytest.raises(AuthenticationError, match=str(expected)) as info:
            tokens.verify_token(token, key, claim, now=NOW)
        if len(token) > 20:
            assert token not in str(info.value)  # a credential never appears in a message
    else:
        assert tokens.verify_token(token, key, claim, now=NOW).role == expected


def test_expiry_is_reported_for_the_refresh_check():
    verified = tokens.verify_token(_hs({"sub": "a", "exp": int(NOW) + 30}), SECRET, now=NOW)
    assert verified.expires_at == NOW + 30
    assert tokens.verify_token(_hs({"sub": "a"}), SECRET, now=NOW).expires_at is None


def test_signing_algorithm_follows_the_key():
    assert tokens.signing_algorithm(b"k" * 32) == "HS256"
    assert tokens.signing_algorithm(b"k" * 64) == "HS512"
    assert tokens.signing_algorithm(b"k" * 32, "HS512") == "HS256"  # too short for HS512
    assert tokens.signing_algorithm(RSA_PRIVATE, "RS384") == "RS384"
    assert tokens.signing_algorithm(RSA_PRIVATE, "ES256") == "RS256"


# ---- htpasswd -----------------------------------------------------------------------------------------------


def _bcrypt_2y(password: str) -> str:
    return "$2y$" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()[4:]


def test_the_official_suites_apr1_line_from_openssl():
    line = openssl_passwd("-apr1", "-salt", "FG4AO6aX", "123456")
    assert line == "$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf."  # the test-conf/.htpasswd of pulsar-client-python
    table = Htpasswd.parse(f"admin:{line}\n")
    assert table.check("admin", "123456") and not table.check("admin", "1234567") and not table.check("x", "123456")


@pytest.mark.parametrize("make,scheme", [
    (lambda pw: openssl_passwd("-apr1", pw), "apr1"),
    (lambda pw: openssl_passwd("-1", pw), "md5-crypt"),
    (lambda pw: openssl_passwd("-5", pw), "sha256-crypt"),
    (lambda pw: openssl_passwd("-6", pw), "sha512-crypt"),
    (_bcrypt_2y, "bcrypt"),
    (lambda pw: "$2b$" + _bcrypt_2y(pw)[4:], "bcrypt"),
    (lambda pw: "$2a$" + _bcrypt_2y(pw)[4:], "bcrypt"),
    (lambda pw: "{SHA}" + base64.b64encode(hashlib.sha1(pw.encode()).digest()).decode(), "sha1"),
    (lambda pw: des_crypt.hash(pw), "des-crypt"),
])
def test_each_hash_format_checks_its_password(make, scheme):
    hashed = make("s3cret pw")
    assert hash_scheme(hashed) == scheme
    assert check_password("s3cret pw", hashed)
    assert not check_password("S3cret pw", hashed) and not check_password("", hashed)


def test_bcrypt_refuses_passwords_it_would_truncate():
    hashed = _bcrypt_2y("a" * 72)
    assert check_password("a" * 72, hashed)
    assert not check_password("a" * 73, hashed)


@pytest.mark.parametrize("text,message", [
    ("admin\n", "expected user:hash"),
    ("admin:plaintext-password\n", "unsupported hash format"),
    ("a:$apr1$x$y\na:$apr1$x$z\n", "appears twice"),
])
def test_a_bad_htpasswd_file_is_refused_naming_the_line(text, message):
    with pytest.raises(HtpasswdError, match=message) as info:
        Htpasswd.parse(text, "conf")
    assert "line" in str(info.value) and "plaintext-password" not in str(info.value)


# ---- TLS client certificates ---------------------------------------------------------------------------------


def _handshake(ca: trustme.CA, client_cert, server_trusts: trustme.CA | None):
    """An in-memory TLS handshake; returns the server's SSLObject (what the listener's transport holds)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("broker.test").configure_cert(server_ctx)
    if server_trusts is not None:
        server_trusts.configure_trust(server_ctx)
        server_ctx.verify_mode = ssl.CERT_OPTIONAL
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    if client_cert is not None:
        client_cert.configure_cert(client_ctx)
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="broker.test")
    for _ in range(10):
        for end in (client, server):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    client.do_handshake()
    server.do_handshake()
    return server


def test_the_tls_role_is_the_verified_certificates_cn():
    ca = trustme.CA()
    server = _handshake(ca, ca.issue_cert("client.test", common_name="superUser"), server_trusts=ca)
    assert role_from_certificate(server) == "superUser"


@pytest.mark.parametrize("case,message", [
    ("no certificate", "no trusted certificate"),
    ("untrusted CA, not verified", "no trusted certificate"),
    ("no CN", "no CN"),
    ("plain connection", "needs a TLS connection"),
])
async def test_the_tls_provider_refuses_what_it_cannot_trust(case, message):
    ca, other = trustme.CA(), trustme.CA()
    ssl_object = {
        "no certificate": lambda: _handshake(ca, None, server_trusts=ca),
        # the listener verifies nothing (CERT_NONE): a presented certificate must not name a role
        "untrusted CA, not verified": lambda: _handshake(ca, other.issue_cert("c.test", common_name="x"), None),
        "no CN": lambda: _handshake(ca, ca.issue_cert("client.test"), server_trusts=ca),
        "plain connection": lambda: None,
    }[case]()
    with pytest.raises(AuthenticationError, match=message):
        await TlsProvider().authenticate(b"", ssl_object)


# ---- the service: methods, anonymous role, bounds, HTTP headers ----------------------------------------------


def _service(anonymous=None, basic_line=None) -> AuthenticationService:
    providers = {"token": TokenProvider(SECRET, "sub", clock), "tls": TlsProvider()}
    if basic_line:
        providers["basic"] = BasicProvider(Htpasswd.parse(basic_line))
    return AuthenticationService(True, providers, anonymous)


SERVICE_ROWS = [
    # anonymous role, method, data, role or error substring
    (None, "token", _hs({"sub": "alice"}).encode(), "alice"),
    (None, "none", b"", AuthenticationError("sent no credentials; this broker takes token, tls")),
    (None, "", b"", AuthenticationError("no anonymous role")),
    ("anon", "none", b"", "anon"),
    (None, "unknown", b"x", AuthenticationError("unknown authentication method 'unknown'")),
    ("anon", "unknown", b"x", "anon"),  # as in Pulsar: a method the broker lacks is the anonymous role
    ("anon", "token", _hs({"sub": "a"}, OTHER_SECRET).encode(), AuthenticationError("wrong signature")),
    ("anon", "token", b"", AuthenticationError("missing token")),
    (None, "token", b"\xff\xfe", AuthenticationError("not UTF-8")),
    (None, "token", b"x" * (MAX_AUTH_DATA_BYTES + 1), AuthenticationError("auth_data is")),
    (None, "m" * 65, b"", AuthenticationError("auth_method_name is longer")),
    (None, "tls", b"", AuthenticationError("needs a TLS connection")),
]


@pytest.mark.parametrize("anonymous,method,data,expected", SERVICE_ROWS)
async def test_service_authenticate(anonymous, method, data, expected):
    service = _service(anonymous)
    if isinstance(expected, AuthenticationError):
        with pytest.raises(AuthenticationError, match=str(expected)):
            await service.authenticate(method, data)
    else:
        assert (await service.authenticate(method, data)).role == expected


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


HTTP_ROWS = [
    (None, "Bearer " + _hs({"sub": "alice"}), "alice"),
    (None, "bearer   " + _hs({"sub": "alice"}) + " ", "alice"),
    (None, _basic("admin:123456"), "admin"),
    (None, _basic("admin:wrong"), AuthenticationError("wrong password")),
    (None, _basic("no-colon"), AuthenticationError("expected user:password")),
    (None, "Basic %%%", AuthenticationError("not base64")),
    (None, "Digest abc", AuthenticationError("unsupported Authorization scheme 'digest'")),
    (None, "Bearer " + _hs({"sub": "alice", "exp": int(NOW) - 1}), AuthenticationError("expired")),
    (None, None, AuthenticationError("carries no credentials")),
    ("anon", None, "anon"),
    ("anon", "Bearer garbage", AuthenticationError("malformed")),  # presented and wrong: never downgraded
]


@pytest.mark.parametrize("anonymous,header,expected", HTTP_ROWS)
async def test_service_authenticate_http(anonymous, header, expected):
    service = _service(anonymous, basic_line="admin:" + openssl_passwd("-apr1", "123456"))
    if isinstance(expected, AuthenticationError):
        with pytest.raises(AuthenticationError, match=str(expected)):
            await service.authenticate_http(header)
    else:
        assert (await service.authenticate_http(header)).role == expected


async def test_basic_over_http_when_only_token_is_enabled():
    with pytest.raises(AuthenticationError, match="basic authentication is not enabled"):
        await _service().authenticate_http(_basic("a:b"))


def test_the_service_reads_its_settings_at_start(tmp_path):
    (tmp_path / "secret.key").write_bytes(SECRET)
    (tmp_path / "htpasswd").write_text("admin:" + openssl_passwd("-apr1", "123456") + "\n")
    config = BrokerConfig("memory://x", authentication_enabled=True, authentication_providers=("token", "basic", "tls"),
                          token_secret_key=f"file://{tmp_path}/secret.key", basic_auth_conf=str(tmp_path / "htpasswd"),
                          anonymous_user_role="anon").validate()
    service = AuthenticationService.from_config(config)
    assert set(service.providers) == {"token", "basic", "tls"} and service.anonymous_role == "anon"
    broken = BrokerConfig("memory://x", authentication_enabled=True, authentication_providers=("token",),
                          token_secret_key="file:///nonexistent.key")
    with pytest.raises(ValueError, match="authentication provider token: cannot read key file"):
        AuthenticationService.from_config(broken)
    assert not AuthenticationService.from_config(BrokerConfig("memory://x")).enabled


@pytest.mark.parametrize("changes,message", [
    ({"authentication_enabled": True}, "at least one of authentication_providers"),
    ({"authentication_enabled": True, "authentication_providers": ("token",)}, "token_secret_key or token_public_key"),
    ({"authentication_enabled": True, "authentication_providers": ("basic",)}, "basic_auth_conf"),
    ({"authentication_providers": ("kerberos",)}, "unknown provider"),
    ({"authentication_refresh_check_s": 0}, "authentication_refresh_check_s"),
])
def test_config_checks(changes, message):
    with pytest.raises(ValueError, match=message):
        BrokerConfig("memory://x", **changes).validate()


def test_credentials_of_connect():
    def connect(**fields):
        return pb.CommandConnect(client_version="t", **fields)

    assert credentials_of(connect(auth_method_name="token", auth_data=b"t")) == ("token", b"t")
    assert credentials_of(connect()) == ("none", b"")
    assert credentials_of(connect(auth_method=pb.AuthMethodYcaV1)) == ("ycav1", b"")


# ---- the refresh decision -------------------------------------------------------------------------------------

REFRESH_ROWS = [
    # now, expires at, challenge pending, client supports refresh, action
    (100, None, False, True, RefreshAction.NOTHING),
    (100, 101, False, True, RefreshAction.NOTHING),
    (100, 101, True, True, RefreshAction.NOTHING),  # a refresh answered early; nothing due
    (100, 100, False, True, RefreshAction.CHALLENGE),
    (100, 50, False, True, RefreshAction.CHALLENGE),
    (100, 50, True, True, RefreshAction.CLOSE_UNANSWERED),
    (100, 50, False, False, RefreshAction.CLOSE_NO_REFRESH),
    (100, None, False, False, RefreshAction.NOTHING),
]


@pytest.mark.parametrize("now,expires_at,pending,supports,action", REFRESH_ROWS)
def test_refresh_action(now, expires_at, pending, supports, action):
    assert refresh_action(now, expires_at, pending, supports) is action


def test_every_refresh_action_is_covered():
    assert {row[-1] for row in REFRESH_ROWS} == set(RefreshAction)


def test_tokens_made_here_pass_the_provider_until_they_expire():
    provider = TokenProvider(SECRET, "sub", clock)
    token = tokens.create_token(SECRET, "alice", expires_at=NOW + 5)
    assert provider.verify(token).expires_at == NOW + 5
    late = TokenProvider(SECRET, "sub", lambda: NOW + 5)
    with pytest.raises(AuthenticationError, match="expired"):
        late.verify(token)


# ---- the connection, in process: CONNECT waits for the check; AUTH_RESPONSE work is bounded --------------------


def _service_with(provider) -> SimpleNamespace:
    """What a ServerConnection needs of its broker, with authentication by ``provider`` (no broker behind it)."""
    return SimpleNamespace(config=BrokerConfig("memory://unused"), connections=set(), version="test",
                           connection_limits=ConnectionLimits(), publish_buffer=PublishBuffer(0),
                           authentication=AuthenticationService(True, {"basic": provider}))


class _HeldProvider:
    """A provider whose checks wait until the test releases them (a scripted hold, not a race)."""

    name = "basic"

    def __init__(self):
        self.calls = 0
        self.release = asyncio.Event()

    async def authenticate(self, data, ssl_object=None):
        self.calls += 1
        await self.release.wait()
        return Authenticated("held", "basic")


async def test_connected_waits_for_the_check_and_a_second_auth_response_is_dropped_while_one_is_checked():
    provider = _HeldProvider()
    service = _service_with(provider)
    conn, transport = ServerConnection(service), RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(encode_command(command(T.CONNECT, connect=pb.CommandConnect(
        client_version="t", protocol_version=20, auth_method_name="basic", auth_data=b"u:p"))))
    await asyncio.sleep(0)  # let the check start; it is held
    assert provider.calls == 1 and transport.written == b""  # nothing answered before the check
    provider.release.set()
    for _ in range(100):
        if transport.written:
            break
        await asyncio.sleep(0)
    [connected] = FrameDecoder(1 << 20).feed(transport.written)
    assert connected.command.type == T.CONNECTED and conn.auth_role == "held"
    provider.release.clear()
    response = encode_command(command(T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(
        response=pb.AuthData(auth_method_name="basic", auth_data=b"u:p"))))
    conn.data_received(response + response)
    await asyncio.sleep(0)
    assert provider.calls == 2  # the second AUTH_RESPONSE was dropped, not queued
    provider.release.set()
    conn.close()


async def test_https_requests_authenticate_by_client_certificate_unless_a_header_says_otherwise():
    ca = trustme.CA()
    ssl_object = _handshake(ca, ca.issue_cert("client.test", common_name="cert-role"), server_trusts=ca)
    service = _service()
    assert (await service.authenticate_http(None, ssl_object)).role == "cert-role"
    assert (await service.authenticate_http("Bearer " + _hs({"sub": "alice"}), ssl_object)).role == "alice"
    without_tls_provider = AuthenticationService(True, {"token": TokenProvider(SECRET, "sub", clock)})
    with pytest.raises(AuthenticationError, match="carries no credentials"):
        await without_tls_provider.authenticate_http(None, ssl_object)


async def test_a_second_connect_while_the_first_is_checked_closes_the_connection():
    provider = _HeldProvider()
    service = _service_with(provider)
    conn, transport = ServerConnection(service), RecordingTransport()
    conn.connection_made(transport)
    connect = encode_command(command(T.CONNECT, connect=pb.CommandConnect(
        client_version="t", protocol_version=20, auth_method_name="basic", auth_data=b"u:p")))
    conn.data_received(connect + connect)
    await asyncio.sleep(0)
    assert transport.closed and provider.calls <= 1
    provider.release.set()


async def test_queued_basic_checks_are_bounded():
    # concurrency 0: every check waits in the queue
    provider = BasicProvider(Htpasswd.parse("u:" + openssl_passwd("-apr1", "pw")), max_pending=2, concurrency=0)
    waiting = [asyncio.ensure_future(provider.check("u", "pw")) for _ in range(2)]
    await asyncio.sleep(0)
    assert provider.pending == 2
    with pytest.raises(AuthenticationError, match="too many basic authentication checks"):
        await provider.check("u", "pw")
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert provider.pending == 0
