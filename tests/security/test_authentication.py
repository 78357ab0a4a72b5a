"""Authentication end to end: a real `broker standalone` with the token and basic providers on, driven by the
official `pulsar-client` 3.13, by hand-made frames (to read the exact refusal), and over HTTP.

Keys are made by the `broker tokens` console script, the htpasswd file by `openssl passwd` (apr1, the format
of the official Python client's own test suite) and bcrypt ($2y$, as `htpasswd -B` writes).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import bcrypt
import pulsar
import pytest

from broker.security import tokens
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command
from storage.testing.processes import VENV_BIN, BrokerProcess
from storage.testing.waiting import wait_until
from tests.official_client.support import RawConnection, receive_n

T = pb.BaseCommand
LOGGER = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ADMIN_PASSWORD = "123456"  # the official suite's basic-auth user: admin / 123456
BCRYPT_PASSWORD = "b-" + uuid.uuid4().hex
REFRESH_CHECK_S = 1


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth-keys")
    secret = root / "secret.key"
    subprocess.run([str(VENV_BIN / "broker"), "tokens", "create-secret-key", "--output", str(secret)], check=True)
    apr1 = subprocess.run(["openssl", "passwd", "-apr1", ADMIN_PASSWORD], check=True, capture_output=True,
                          text=True).stdout.strip()
    bcrypt_line = "$2y$" + bcrypt.hashpw(BCRYPT_PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()[4:]
    htpasswd = root / ".htpasswd"
    htpasswd.write_text(f"admin:{apr1}\nbob:{bcrypt_line}\n")
    return {"secret": secret, "key": secret.read_bytes(), "htpasswd": htpasswd}


def auth_env(keys, **extra) -> dict[str, str]:
    env = {
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true",
        "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token,basic",
        "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{keys['secret']}",
        "MAGNETAR_BROKER_BASIC_AUTH_CONF": str(keys["htpasswd"]),
        "MAGNETAR_BROKER_AUTHENTICATION_REFRESH_CHECK_S": str(REFRESH_CHECK_S),
    }
    env.update({f"MAGNETAR_BROKER_{k.upper()}": v for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def broker(tmp_path_factory, keys):
    """Token and basic providers, no anonymous role: a client without credentials is refused."""
    process = BrokerProcess(tmp_path_factory.mktemp("auth-broker") / "data", env=auth_env(keys))
    process.start(timeout_s=60)
    yield process
    process.stop()


def token(keys, role: str, expires_in_s: float | None = None, key: bytes | None = None) -> str:
    return tokens.create_token(key or keys["key"], role, None if expires_in_s is None else time.time() + expires_in_s)


def log_text(broker) -> str:
    return broker.log_path.read_text(errors="replace")


def client(url: str, auth=None, timeout_s: int = 15) -> pulsar.Client:
    kwargs = {} if auth is None else {"authentication": auth}
    return pulsar.Client(url, operation_timeout_seconds=timeout_s, logger=LOGGER, **kwargs)


def topic_name() -> str:
    return f"persistent://public/default/auth-{uuid.uuid4().hex[:10]}"


def raw_connect(broker, method: str | None, data: bytes | None, supports_refresh: bool = True) -> RawConnection:
    conn = RawConnection(broker.port)
    fields = {"client_version": "raw-test", "protocol_version": 20,
              "feature_flags": pb.FeatureFlags(supports_auth_refresh=supports_refresh)}
    if method is not None:
        fields["auth_method_name"] = method
    if data is not None:
        fields["auth_data"] = data
    conn.send(encode_command(command(T.CONNECT, connect=pb.CommandConnect(**fields))))
    return conn


def http(broker, path: str, authorization: str | None = None) -> tuple[int, object]:
    headers = {} if authorization is None else {"Authorization": authorization}
    request = urllib.request.Request(f"{broker.web_url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if resp.headers.get_content_type() == "application/json" else body
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def produce_consume(c: pulsar.Client, n: int = 3) -> None:
    topic = topic_name()
    consumer = c.subscribe(topic, "s")
    producer = c.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive_n(consumer, n)] == [f"m{i}".encode() for i in range(n)]


# ---- who gets in -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["binary", "http lookup"])
def test_token_and_basic_clients_produce_and_consume(broker, keys, via):
    """A token, the official suite's apr1 user and a bcrypt user, with the binary and the HTTP service URL."""
    url = broker.service_url if via == "binary" else broker.web_url
    for auth in (pulsar.AuthenticationToken(token(keys, "alice")),
                 pulsar.AuthenticationBasic("admin", ADMIN_PASSWORD),
                 pulsar.AuthenticationBasic(auth_params_string=json.dumps({"username": "bob", "password": BCRYPT_PASSWORD}))):
        c = client(url, auth)
        try:
            produce_consume(c)
        finally:
            c.close()
    if via == "binary":
        log = log_text(broker)
        assert "authenticated as role 'alice' by token" in log and "authenticated as role 'admin' by basic" in log
        assert "authenticated as role 'bob' by basic" in log


# ---- who does not, and what they hear ------------------------------------------------------------------------

OTHER_KEY = b"another secret key, 32 bytes...!"

REFUSALS = [
    # case, auth_method_name, auth_data (callable on keys), what the ERROR says
    ("wrong signature", "token", lambda k: token(k, "alice", key=OTHER_KEY).encode(), "wrong signature"),
    ("expired token", "token", lambda k: token(k, "alice", expires_in_s=-10).encode(), "token expired"),
    ("missing token", "token", lambda k: b"", "missing token"),
    ("no credentials", None, lambda k: None, "the client sent no credentials"),
    ("unknown method", "kerberos", lambda k: b"ticket", "unknown authentication method 'kerberos'"),
    ("bad password", "basic", lambda k: b"admin:not-the-password", "unknown user or wrong password"),
    ("malformed basic", "basic", lambda k: b"admin", "expected user:password"),
]


@pytest.mark.parametrize("case,method,data,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refused_connect_hears_why_and_harms_no_other_connection(broker, keys, case, method, data, message):
    good = client(broker.service_url, pulsar.AuthenticationToken(token(keys, "bystander")))
    try:
        topic = topic_name()
        consumer = good.subscribe(topic, "s")
        producer = good.create_producer(topic)
        producer.send(b"before")
        raw = raw_connect(broker, method, data(keys))
        try:
            reply = raw.next()
            assert reply.type == T.ERROR, T.Type.Name(reply.type)
            assert reply.error.error == pb.AuthenticationError and message in reply.error.message, reply.error.message
            assert raw.closed_by_peer()
        finally:
            raw.close()
        producer.send(b"after")
        assert [m.data() for m in receive_n(consumer, 2)] == [b"before", b"after"]
    finally:
        good.close()


@pytest.mark.parametrize("case,auth,message", [
    ("wrong signature", lambda k: pulsar.AuthenticationToken(token(k, "eve", key=OTHER_KEY)), "wrong signature"),
    ("expired token", lambda k: pulsar.AuthenticationToken(token(k, "eve", expires_in_s=-10)), "token expired"),
    ("missing token", lambda k: None, "the client sent no credentials"),
    ("bad password", lambda k: pulsar.AuthenticationBasic("admin", "wrong"), "wrong password"),
])
def test_the_official_client_is_refused(broker, keys, case, auth, message):
    """The C++ client takes any answer to CONNECT but CONNECTED as a dropped connection and retries until its
    operation timeout (binary URL); over the HTTP service URL the 401 fails it at once (ConnectError), as the
    official suite expects. The broker's log names the specific reason either way."""
    before = log_text(broker).count(message)
    c = client(broker.service_url, auth(keys), timeout_s=2)
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer(topic_name())
    finally:
        c.close()
    assert log_text(broker).count(message) > before
    c = client(broker.web_url, auth(keys))
    try:
        started = time.monotonic()
        with pytest.raises(pulsar.ConnectError):
            c.create_producer(topic_name())
        assert time.monotonic() - started < 5
    finally:
        c.close()


# ---- refresh: AUTH_CHALLENGE / AUTH_RESPONSE ---------------------------------------------------------------------


def test_a_token_supplier_refreshes_an_expiring_token_on_the_same_connection(broker, keys):
    role = f"refresher-{uuid.uuid4().hex[:6]}"
    issued: list[str] = []

    def supplier() -> str:
        issued.append(token(keys, role, expires_in_s=3))
        return issued[-1]

    c = client(broker.service_url, pulsar.AuthenticationToken(supplier))
    try:
        topic = topic_name()
        consumer = c.subscribe(topic, "s")
        producer = c.create_producer(topic)
        sent = []

        def refreshed_twice():
            producer.send(str(len(sent)).encode())  # keeps producing across each expiry
            sent.append(len(sent))
            return log_text(broker).count(f"refreshed the credential of role '{role}'") >= 2

        wait_until(refreshed_twice, 30, "the broker to refresh the token twice")
        received = [int(m.data()) for m in receive_n(consumer, len(sent))]
        assert received == sent
    finally:
        c.close()
    log = log_text(broker)
    assert log.count(f"authenticated as role '{role}'") == 1  # one CONNECT: the connection was never replaced
    assert len(issued) >= 3 and f"closing the connection of role '{role}'" not in log


def _auth_response(data: bytes, method: str = "token") -> bytes:
    return encode_command(command(T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(
        client_version="raw-test", protocol_version=20, response=pb.AuthData(auth_method_name=method, auth_data=data))))


def test_a_fresh_token_keeps_the_connection_and_a_new_role_is_refused(broker, keys):
    role = f"raw-{uuid.uuid4().hex[:6]}"
    raw = raw_connect(broker, "token", token(keys, role, expires_in_s=1).encode())
    try:
        assert raw.next().type == T.CONNECTED
        challenge = raw.next()
        assert challenge.type == T.AUTH_CHALLENGE
        assert (challenge.authChallenge.challenge.auth_method_name, challenge.authChallenge.challenge.auth_data) == \
            ("token", b"PulsarAuthRefresh")
        raw.send(_auth_response(token(keys, role, expires_in_s=3).encode()))
        wait_until(lambda: f"refreshed the credential of role '{role}'" in log_text(broker), 10, "the refresh")
        raw.send(encode_command(command(T.PING, ping=pb.CommandPing())))
        assert raw.next().type == T.PONG  # still connected, past the first token's expiry
        assert raw.next().type == T.AUTH_CHALLENGE  # the refreshed token expired in turn
        raw.send(_auth_response(token(keys, "someone-else").encode()))
        refusal = raw.next()
        assert refusal.type == T.ERROR and refusal.error.error == pb.AuthenticationError
        assert "a role cannot change" in refusal.error.message
        assert raw.closed_by_peer()
    finally:
        raw.close()


@pytest.mark.parametrize("supports_refresh,answer", [(True, None), (True, b"garbage"), (False, None)],
                         ids=["unanswered challenge", "bad answer", "client cannot refresh"])
def test_an_expired_token_that_is_not_refreshed_closes_the_connection(broker, keys, supports_refresh, answer):
    raw = raw_connect(broker, "token", token(keys, "short-lived", expires_in_s=1).encode(), supports_refresh)
    try:
        assert raw.next().type == T.CONNECTED
        if supports_refresh:
            assert raw.next().type == T.AUTH_CHALLENGE
            if answer is not None:
                raw.send(_auth_response(answer))
                refusal = raw.next()
                assert refusal.type == T.ERROR and "malformed token" in refusal.error.message
        with pytest.raises(ConnectionResetError):
            frame = raw.next()  # nothing more but the close (no challenge for a client that cannot answer)
            raise AssertionError(f"unexpected {T.Type.Name(frame.type)}")
    finally:
        raw.close()


# ---- HTTP ---------------------------------------------------------------------------------------------------------


def test_http_answers_401_with_the_reason(broker, keys):
    cases = [
        (None, 401, "carries no credentials"),
        ("Bearer " + token(keys, "alice", key=OTHER_KEY), 401, "wrong signature"),
        ("Bearer " + token(keys, "alice", expires_in_s=-5), 401, "token expired"),
        ("Bearer ", 401, "missing token"),
        (basic("admin", "wrong"), 401, "wrong password"),
        ("Negotiate abc", 401, "unsupported Authorization scheme"),
        ("Bearer " + token(keys, "alice"), 200, None),
        (basic("admin", ADMIN_PASSWORD), 200, None),
        (basic("bob", BCRYPT_PASSWORD), 200, None),
    ]
    for authorization, status, reason in cases:
        code, body = http(broker, "/admin/v2/tenants", authorization)
        assert code == status, (authorization, code, body)
        if reason is not None:
            assert reason in body["reason"], body
        else:
            assert "public" in body
    assert http(broker, "/lookup/v2/topic/persistent/public/default/t")[0] == 401
    assert http(broker, "/admin/v2/brokers/health")[0] == 401
    assert http(broker, "/health")[0] == 200  # liveness stays open
    assert http(broker, "/metrics")[0] == 200  # authenticate_metrics_endpoint is off by default


def test_secrets_never_reach_the_log(broker, keys):
    good, wrong = token(keys, "quiet"), token(keys, "quiet", key=OTHER_KEY)
    good_password, wrong_password = BCRYPT_PASSWORD, "wrong-" + uuid.uuid4().hex
    for auth in (pulsar.AuthenticationToken(good), pulsar.AuthenticationBasic("bob", good_password)):
        c = client(broker.service_url, auth)
        try:
            c.create_producer(topic_name()).send(b"x")
        finally:
            c.close()
    for method, data in (("token", wrong), ("basic", f"bob:{wrong_password}")):
        raw = raw_connect(broker, method, data.encode())
        try:
            assert raw.next().type == T.ERROR
        finally:
            raw.close()
    for authorization in ("Bearer " + good, "Bearer " + wrong, basic("bob", good_password), basic("bob", wrong_password)):
        http(broker, "/admin/v2/tenants", authorization)
    wait_until(lambda: log_text(broker).count("authentication failed on connect") >= 2 and "role 'quiet'" in log_text(broker),
               10, "the broker to log the attempts")
    log = log_text(broker)
    for secret in (good, wrong, good_password, wrong_password, good.split(".")[2], wrong.split(".")[2],
                   base64.b64encode(f"bob:{good_password}".encode()).decode()):
        assert secret not in log
    assert keys["key"].hex() not in log and base64.b64encode(keys["key"]).decode() not in log


# ---- the anonymous role --------------------------------------------------------------------------------------------


def test_no_credentials_get_the_anonymous_role(tmp_path, keys):
    process = BrokerProcess(tmp_path / "data", env=auth_env(keys, anonymous_user_role="anon-role"))
    process.start(timeout_s=60)
    try:
        c = client(process.service_url)
        try:
            produce_consume(c, 1)
        finally:
            c.close()
        assert "authenticated as role 'anon-role' by anonymous" in log_text(process)
        assert http(process, "/admin/v2/tenants")[0] == 200
        # credentials that are presented and wrong are refused, not taken as anonymous
        code, body = http(process, "/admin/v2/tenants", "Bearer " + token(keys, "x", key=OTHER_KEY))
        assert code == 401 and "wrong signature" in body["reason"]
        raw = raw_connect(process, "token", token(keys, "x", expires_in_s=-1).encode())
        try:
            reply = raw.next()
            assert reply.type == T.ERROR and "token expired" in reply.error.message
        finally:
            raw.close()
    finally:
        process.stop()


# ---- with authorization: the roles authentication names are the ones permissions are checked for -----------------


def rest(broker, method: str, path: str, authorization: str, body=None) -> tuple[int, object]:
    request = urllib.request.Request(f"{broker.web_url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": authorization, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text and resp.headers.get_content_type() == "application/json" else text
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def secured_broker(tmp_path, keys) -> BrokerProcess:
    """The official Python client's CI settings, in short: token and basic, the anonymous role ``anonymous``,
    authorization on, superusers ``superUser`` and ``admin``. It starts with no tenant public (authorization is on)."""
    process = BrokerProcess(tmp_path / "data", env=auth_env(
        keys, anonymous_user_role="anonymous", authorization_enabled="true", super_user_roles="superUser,admin"))
    return process.start(timeout_s=60)


def create_public_default(broker, authorization: str, grants: dict[str, list[str]]) -> None:
    """What the official client's CI does as superUser: PUT tenant public, then namespace public/default with
    ``grants`` as its namespace_auth; both must be created (204), not found existing."""
    assert rest(broker, "PUT", "/admin/v2/tenants/public", authorization,
                {"adminRoles": [], "allowedClusters": ["standalone"]})[0] == 204
    assert rest(broker, "PUT", "/admin/v2/namespaces/public/default", authorization,
                {"auth_policies": {"namespace_auth": grants}, "replication_clusters": ["standalone"]})[0] == 204


def test_a_token_role_is_refused_on_private_auth_until_a_grant_over_rest(tmp_path, keys):
    """The official Python client's own CI setup, in short: superUser administers over REST with a token, the
    anonymous role may use public/default only, and token-principal gets private/auth when granted."""
    process = secured_broker(tmp_path, keys)
    superuser = "Bearer " + token(keys, "superUser")
    try:
        create_public_default(process, superuser, {"anonymous": ["produce", "consume"]})
        assert rest(process, "PUT", "/admin/v2/tenants/private", superuser,
                    {"adminRoles": [], "allowedClusters": ["standalone"]})[0] == 204
        assert rest(process, "PUT", "/admin/v2/namespaces/private/auth", superuser, {})[0] == 204
        principal = pulsar.AuthenticationToken(token(keys, "token-principal"))
        private_topic = f"persistent://private/auth/t-{uuid.uuid4().hex[:8]}"

        # token-principal: refused on private/auth (over the wire and over REST) until granted
        c = client(process.service_url, principal, timeout_s=5)
        try:
            with pytest.raises(pulsar.AuthorizationError):
                c.create_producer(private_topic)
        finally:
            c.close()
        code, _ = rest(process, "POST", "/admin/v2/namespaces/private/auth/permissions/token-principal",
                       "Bearer " + token(keys, "token-principal"), ["produce", "consume"])
        assert code == 403  # a role cannot grant itself
        assert rest(process, "POST", "/admin/v2/namespaces/private/auth/permissions/token-principal", superuser,
                    ["produce", "consume"])[0] == 204

        def produces():
            c = client(process.service_url, principal, timeout_s=5)
            try:
                c.create_producer(private_topic).send(b"granted")
                return True
            except pulsar.AuthorizationError:
                return False
            finally:
                c.close()

        wait_until(produces, 10, "the grant to reach the broker")

        # the anonymous role: public/default yes, private/auth no; a wrong credential is 401, not anonymous
        c = client(process.service_url, timeout_s=5)
        try:
            c.create_producer(topic_name()).send(b"anonymous")
            with pytest.raises(pulsar.AuthorizationError):
                c.create_producer(f"persistent://private/auth/t-{uuid.uuid4().hex[:8]}")
        finally:
            c.close()
        assert rest(process, "GET", "/admin/v2/namespaces/private/auth/permissions", superuser)[0] == 200
        assert http(process, "/admin/v2/namespaces/private/auth/permissions")[0] == 403  # anonymous: not an admin
        assert http(process, "/admin/v2/tenants", "Bearer " + token(keys, "x", key=OTHER_KEY))[0] == 401
        # the official suite's basic user is a superuser there too
        assert http(process, "/admin/v2/namespaces/private/auth/permissions", basic("admin", ADMIN_PASSWORD))[0] == 200
    finally:
        process.stop()


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_a_key_pair_from_the_cli_authenticates_on_a_broker_with_the_public_key(tmp_path, algorithm):
    """`broker tokens create-key-pair` writes DER as `pulsar tokens` does; the broker reads the public key from
    tokenPublicKey and takes the tokens `broker tokens create --private-key` prints."""
    cli = str(VENV_BIN / "broker")
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    subprocess.run([cli, "tokens", "create-key-pair", "-a", algorithm, "--output-private-key", str(private),
                    "--output-public-key", str(public)], check=True)

    def cli_token(role: str) -> str:
        return subprocess.run([cli, "tokens", "create", "--private-key", f"file://{private}", "--subject", role],
                              check=True, capture_output=True, text=True).stdout.strip()

    process = BrokerProcess(tmp_path / "data", env={
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true", "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token",
        "MAGNETAR_BROKER_TOKEN_PUBLIC_KEY": f"file://{public}"})
    process.start(timeout_s=60)
    try:
        c = client(process.service_url, pulsar.AuthenticationToken(cli_token("pair-user")))
        try:
            produce_consume(c, 1)
        finally:
            c.close()
        assert "authenticated as role 'pair-user' by token" in log_text(process)
        raw = raw_connect(process, "token", token({"key": b"s" * 32}, "hs-user").encode())  # an HS256 token
        try:
            reply = raw.next()
            assert reply.type == T.ERROR and "token signed with 'HS256'" in reply.error.message
            assert algorithm in reply.error.message  # what the broker's public key takes instead
        finally:
            raw.close()
    finally:
        process.stop()


# ---- public/default: created at start only while authorization is off --------------------------------------------


def test_public_default_is_created_at_start_only_with_authorization_off(tmp_path, keys, broker):
    """Authorization off (the module's broker): public/default exists from the start, as on Pulsar standalone.
    Authorization on: the broker creates neither tenant public nor public/default; a superuser's PUTs create them
    (204) with the grants it chooses, and those grants decide who produces there."""
    anyone = "Bearer " + token(keys, "anyone")
    assert "public" in http(broker, "/admin/v2/tenants", anyone)[1]
    assert http(broker, "/admin/v2/namespaces/public", anyone) == (200, ["public/default"])

    secured = secured_broker(tmp_path, keys)
    superuser = "Bearer " + token(keys, "superUser")
    topic = topic_name()  # in public/default
    try:
        status, tenants = http(secured, "/admin/v2/tenants", superuser)
        assert status == 200 and "public" not in tenants, tenants
        assert http(secured, "/admin/v2/namespaces/public/default", superuser)[0] == 404
        c = client(secured.service_url, timeout_s=5)
        try:
            with pytest.raises(pulsar.TopicNotFound):  # its namespace does not exist (as Pulsar answers)
                c.create_producer(topic)
        finally:
            c.close()

        create_public_default(secured, superuser, {"anonymous": ["produce", "consume"], "app": ["produce"]})
        assert "public" in http(secured, "/admin/v2/tenants", superuser)[1]
        assert rest(secured, "PUT", "/admin/v2/namespaces/public/default", superuser, {})[0] == 409  # now it exists

        def produces(auth=None) -> bool:
            c = client(secured.service_url, auth, timeout_s=5)
            try:
                c.create_producer(topic).send(b"granted")
                return True
            except (pulsar.AuthorizationError, pulsar.TopicNotFound):
                return False
            finally:
                c.close()

        wait_until(produces, 10, "the new namespace and its grant to reach the broker")  # by its metadata watch
        assert produces(pulsar.AuthenticationToken(token(keys, "app")))
        c = client(secured.service_url, pulsar.AuthenticationToken(token(keys, "other")), timeout_s=5)
        try:
            with pytest.raises(pulsar.AuthorizationError):  # a role the superuser did not grant
                c.create_producer(topic)
        finally:
            c.close()
    finally:
        secured.stop()
