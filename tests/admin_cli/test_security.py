"""`magnetar-admin` against a broker with https and the token, basic and TLS authentication providers on:
each credential form pulsar-admin takes (flags and client.conf), and the refusals (no or wrong credentials,
an untrusted broker certificate) exiting 1 with the reason."""

from __future__ import annotations

import subprocess
import uuid

import bcrypt
import pytest

from broker.security import tokens
from storage.testing.processes import VENV_BIN, BrokerProcess, free_port
from tests.admin_cli.support import run
from tests.fixtures.security import TlsBroker, tls_config_toml

TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
TLS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
PASSWORD = "pw-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("admin-cli-keys")
    secret = root / "secret.key"
    subprocess.run([str(VENV_BIN / "broker"), "tokens", "create-secret-key", "--output", str(secret)], check=True)
    htpasswd = root / ".htpasswd"
    htpasswd.write_text("admin:$2y$" + bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()[4:] + "\n")
    return {"root": root, "secret": secret, "htpasswd": htpasswd}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, tls_files, keys) -> TlsBroker:
    root = tmp_path_factory.mktemp("admin-cli-secure")
    tls_port, https_port = free_port(), free_port()
    config = root / "broker.toml"
    config.write_text(tls_config_toml(tls_files, tls_port, https_port))
    env = {"MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true",
           "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "tls,token,basic",
           "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{keys['secret']}",
           "MAGNETAR_BROKER_BASIC_AUTH_CONF": str(keys["htpasswd"])}
    process = BrokerProcess(root / "data", extra_args=["--config", str(config)], env=env)
    process.start(timeout_s=60)
    yield TlsBroker(process, tls_port, https_port)
    process.stop()


def _token(keys, role: str = "admin") -> str:
    return tokens.create_token(keys["secret"].read_bytes(), role)


def test_token_by_flags_by_file_and_by_client_conf(secure_broker, keys, tmp_path):
    url = secure_broker.process.web_url
    token = _token(keys)
    assert "public" in run("--auth-plugin", TOKEN, "--auth-params", f"token:{token}", "tenants", "list", url=url).lines()
    token_file = tmp_path / "admin.token"
    token_file.write_text(token + "\n")
    assert "public" in run("--auth-plugin", TOKEN, "--auth-params", f"file://{token_file}", "tenants", "list",
                           url=url).lines()
    conf = tmp_path / "client.conf"
    conf.write_text(f"webServiceUrl={url}\nauthPlugin={TOKEN}\nauthParams=file://{token_file}\n")
    assert "public" in run("tenants", "list", env={"PULSAR_CLIENT_CONF": str(conf)}).lines()


def test_basic_authentication(secure_broker):
    url = secure_broker.process.web_url
    ok = run("--auth-plugin", BASIC, "--auth-params", f'{{"userId":"admin","password":"{PASSWORD}"}}',
             "tenants", "list", url=url)
    assert "public" in ok.lines()
    wrong = run("--auth-plugin", BASIC, "--auth-params", '{"userId":"admin","password":"nope"}', "tenants", "list",
                url=url)
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr and "authentication failed" in wrong.stderr


@pytest.mark.parametrize("auth_args", [
    (),
    ("--auth-plugin", TOKEN, "--auth-params", "token:not.a.jwt"),
])
def test_missing_or_bad_credentials_exit_1_with_the_reason(secure_broker, auth_args):
    result = run(*auth_args, "tenants", "list", url=secure_broker.process.web_url)
    assert result.returncode == 1 and "HTTP 401" in result.stderr and "authentication failed" in result.stderr
    assert result.stdout == ""


def test_https_with_the_trusted_ca_and_a_client_certificate(secure_broker, tls_files):
    cert, key = tls_files.client("admin-cli")
    result = run("--tls-trust-cert-path", str(tls_files.ca_path), "--auth-plugin", TLS,
                 "--auth-params", f"tlsCertFile:{cert},tlsKeyFile:{key}", "tenants", "get", "public",
                 url=secure_broker.web_url_tls)
    assert result.json()["allowedClusters"] == ["standalone"]


def test_https_with_a_token(secure_broker, tls_files, keys):
    topic = f"persistent://public/default/admin-cli-tls-{uuid.uuid4().hex[:8]}"
    auth = ("--tls-trust-cert-path", str(tls_files.ca_path), "--auth-plugin", TOKEN, "--auth-params",
            f"token:{_token(keys)}")
    run(*auth, "topics", "create", topic, url=secure_broker.web_url_tls).ok()
    assert run(*auth, "topics", "stats", topic, url=secure_broker.web_url_tls).json()["msgInCounter"] == 0


def test_untrusted_broker_certificate_is_refused_unless_insecure_is_allowed(secure_broker, tls_files, keys):
    auth = ("--auth-plugin", TOKEN, "--auth-params", f"token:{_token(keys)}")
    refused = run("--tls-trust-cert-path", str(tls_files.other_ca_path), *auth, "tenants", "list",
                  url=secure_broker.web_url_tls)
    assert refused.returncode == 1 and "TLS handshake" in refused.stderr and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    insecure = run("--tls-trust-cert-path", str(tls_files.other_ca_path), "--tls-allow-insecure", *auth,
                   "tenants", "list", url=secure_broker.web_url_tls)
    assert "public" in insecure.lines()
