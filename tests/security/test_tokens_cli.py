"""`broker tokens`, run as the real console script: the keys it writes are Pulsar's formats (raw secret bytes,
PKCS#8 / X.509 DER), the tokens it prints verify with the broker's own key reading, and bad use fails with
exit status 1 and a reason."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.errors import AuthenticationError
from broker.security import tokens
from broker.security.authentication import TokenProvider
from storage.testing.processes import VENV_BIN


def broker_tokens(*args: str, env=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "broker"), "tokens", *args], capture_output=True, timeout=60, env=env,
                          input=None if stdin is None else stdin.encode())


def ok(*args: str, **kwargs) -> bytes:
    result = broker_tokens(*args, **kwargs)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


def test_secret_key_file_and_base64(tmp_path):
    key_file = tmp_path / "secret.key"
    assert ok("create-secret-key", "--output", str(key_file)) == b""
    assert len(key_file.read_bytes()) == 32 and key_file.stat().st_mode & 0o077 == 0  # raw bytes, owner only
    printed = ok("create-secret-key", "-b")
    assert len(base64.b64decode(printed, validate=True)) == 32
    assert len(ok("create-secret-key", "-a", "HS512")) == 64  # raw bytes on stdout


def test_a_token_from_the_cli_passes_the_broker_and_expires(tmp_path):
    key_file = tmp_path / "secret.key"
    ok("create-secret-key", "--output", str(key_file))
    token = ok("create", "--secret-key", f"file://{key_file}", "--subject", "alice", "--expiry-time", "1h").decode().strip()
    claims = jwt.decode(token, key_file.read_bytes(), algorithms=["HS256"])
    assert claims["sub"] == "alice" and abs(claims["exp"] - (time.time() + 3600)) < 60
    provider = TokenProvider.from_settings(f"file://{key_file}", None, "sub")
    assert provider.verify(token).role == "alice"
    later = TokenProvider.from_settings(f"file://{key_file}", None, "sub", clock=lambda: time.time() + 3601)
    with pytest.raises(AuthenticationError, match="expired"):
        later.verify(token)
    # the same key given as data: and with Pulsar's short flags
    data_url = "data:;base64," + base64.b64encode(key_file.read_bytes()).decode()
    short = ok("create", "-sk", data_url, "-s", "bob").decode().strip()
    assert provider.verify(short).role == "bob" and "exp" not in jwt.decode(short, options={"verify_signature": False})


@pytest.mark.parametrize("algorithm,key_type", [("RS256", rsa.RSAPublicKey), ("ES256", ec.EllipticCurvePublicKey)])
def test_key_pair_in_der_signs_tokens_the_broker_verifies(tmp_path, algorithm, key_type):
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    args = ["create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public)]
    ok(*(args + ([] if algorithm == "RS256" else ["--signature-algorithm", algorithm])))  # RS256 is the default
    assert isinstance(serialization.load_der_public_key(public.read_bytes()), key_type)
    serialization.load_der_private_key(private.read_bytes(), password=None)  # PKCS#8 DER
    assert private.stat().st_mode & 0o077 == 0
    token = ok("create", "--private-key", f"file://{private}", "--subject", "carol").decode().strip()
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    assert TokenProvider.from_settings(None, f"file://{public}", "sub").verify(token).role == "carol"
    claims = json.loads(ok("validate", "--public-key", f"file://{public}", token))
    assert claims == {"sub": "carol"}


def test_show_and_validate_read_the_token_from_args_stdin_file_or_env(tmp_path):
    key_file = tmp_path / "secret.key"
    ok("create-secret-key", "-o", str(key_file))
    token = ok("create", "-sk", str(key_file), "-s", "dave", "-hs", "kid=k1").decode().strip()
    header, _, claims = ok("show", token).decode().strip().partition("\n---\n")
    assert json.loads(header)["kid"] == "k1" and json.loads(claims) == {"sub": "dave"}
    (tmp_path / "token.txt").write_text(token + "\n")
    for args, kwargs in ((["-f", str(tmp_path / "token.txt")], {}), (["-i"], {"stdin": token + "\n"}),
                         ([], {"env": {"TOKEN": token}})):
        assert json.loads(ok("validate", "-sk", f"file://{key_file}", *args, **kwargs)) == {"sub": "dave"}


@pytest.mark.parametrize("args,message", [
    (["create", "-s", "x"], "exactly one of --secret-key and --private-key"),
    (["create", "-s", "x", "-sk", "/nonexistent/key"], "is the path right?"),  # base64 text, 12 bytes
    (["create", "-s", "x", "-sk", "/nonexistent/key!"], "neither"),
    (["create", "-s", "x", "-sk", "file:///nonexistent/key"], "cannot read key file"),
    (["validate", "-sk", "data:;base64," + base64.b64encode(b"o" * 32).decode(),
      tokens.create_token(b"k" * 32, "x")], "wrong signature"),
    (["show", "not-a-token"], "malformed token"),
])
def test_bad_use_fails_with_a_reason(args, message):
    result = broker_tokens(*args, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 1 and message in result.stderr.decode(), result.stderr.decode()


@pytest.mark.parametrize("flag", ["--expiry-time=1x", "--expiry-time=-5"])
def test_a_bad_expiry_is_a_usage_error(tmp_path, flag):
    result = broker_tokens("create", "-sk", "a2V5", "-s", "x", flag)
    assert result.returncode == 2 and "invalid relative time" in result.stderr.decode()
