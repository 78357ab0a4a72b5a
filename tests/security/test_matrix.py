"""Issue 17's "Must show" 1-8 as one matrix, on one `broker standalone --config standalone-ssl.conf` process.

The file has the keys of Pulsar's own standalone-ssl.conf (TLS, the TLS, token and basic providers, the
anonymous role, authorization, superusers), with free ports and test-made certificates, keys and htpasswd.
Tenants and namespaces are set up over https as the superuser the way the official Python client's CI does
(public/default: anonymous may produce and consume; private/auth: nobody until the test grants a role). Every
client-side case runs with the official `pulsar-client` and with `magnetar` (the ``api`` parameter).

What each client reports for a refused CONNECT: magnetar raises AuthenticationError with the broker's reason.
The official C++ client takes any answer to CONNECT other than CONNECTED as a dropped connection and retries
until its operation timeout, so it reports Timeout; for it the broker's log is where the specific reason is
checked. A ``bystander`` (a token role granted on private/auth, connected once for the whole module) sends and
receives after every failure case and is checked never to have reconnected.
"""

from __future__ import annotations

import base64
import http.client
import importlib
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

import magnetar
from broker.security import tokens
from storage.testing.processes import free_port
from storage.testing.waiting import wait_until
from tests.fixtures.security import PropertiesBroker, standalone_ssl_conf
from tests.official_client.support import receive_n

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ADMIN_PASSWORD = "123456"  # the official suite's basic user, admin / 123456 (apr1)
OTHER_KEY = b"not the broker's key, 32 bytes!!"
REFRESH_CHECK_S = 1
REVOCATION_S = 5.0  # the bound
SHORT_TIMEOUT_S = 2  # for cases the official client can only report as a Timeout
NO_ANSWER = object()  # a step in a case that the client must fail


# ---- the broker ---------------------------------------------------------------------------------------------


class Secured:
    """The module's broker and what the tests need to reach it."""

    def __init__(self, process: PropertiesBroker, tls_port: int, https_port: int, files, secret: bytes):
        self.process, self.tls_port, self.https_port, self.files, self.secret = (
            process, tls_port, https_port, files, secret)
        self.url_tls = f"pulsar+ssl://127.0.0.1:{tls_port}"
        self.https = f"https://127.0.0.1:{https_port}"

    def token(self, role: str, expires_in_s: float | None = None, key: bytes | None = None) -> str:
        expires = None if expires_in_s is None else time.time() + expires_in_s
        return tokens.create_token(key or self.secret, role, expires)

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def rest(self, method: str, path: str, authorization: str | None = None, body=None, cafile=None,
             cert: tuple[str, str] | None = None) -> tuple[int, object]:
        """One admin REST call over https; (status, JSON body or None)."""
        ctx = ssl.create_default_context(cafile=str(cafile or self.files.ca_path))
        if cert is not None:
            ctx.load_cert_chain(*cert)
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        request = urllib.request.Request(f"{self.https}{path}", method=method, headers=headers,
                                         data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=15, context=ctx) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text else None
        except urllib.error.HTTPError as err:
            text = err.read()
            return err.code, json.loads(text) if text else None

    def superuser(self, method: str, path: str, body=None) -> int:
        return self.rest(method, path, "Bearer " + self.token("superUser"), body)[0]


@pytest.fixture(scope="module")
def secured(tmp_path_factory, tls_files):
    root = tmp_path_factory.mktemp("matrix")
    secret = tokens.create_secret_key()
    secret_path = root / "secret.key"
    secret_path.write_bytes(secret)
    apr1 = subprocess.run(["openssl", "passwd", "-apr1", ADMIN_PASSWORD], check=True, capture_output=True,
                          text=True).stdout.strip()
    htpasswd = root / ".htpasswd"
    htpasswd.write_text(f"admin:{apr1}\n")
    ports = {"broker_port": free_port(), "tls_port": free_port(), "web_port": free_port(), "https_port": free_port()}
    conf = root / "standalone-ssl.conf"
    conf.write_text(standalone_ssl_conf(
        tls_files, **ports, secret_key_path=secret_path, basic_auth_conf=htpasswd,
        super_user_roles="localhost,superUser,admin", refresh_check_s=REFRESH_CHECK_S))
    process = PropertiesBroker(root / "data", port=ports["broker_port"], http_port=ports["web_port"],
                               extra_args=["--config", str(conf)])
    process.start(timeout_s=60)
    broker = Secured(process, ports["tls_port"], ports["https_port"], tls_files, secret)
    try:
        _set_up_like_the_official_ci(broker)
        yield broker
    finally:
        process.stop()


def _set_up_like_the_official_ci(broker: Secured) -> None:
    """The official client's CI, over https as superUser: with authorization on the broker created neither public
    nor public/default, so the PUTs create them. public's tenant admins stay empty (the CI names anonymous), so
    anonymous gets public/default from the namespace grant alone."""
    assert broker.superuser("PUT", "/admin/v2/clusters/standalone", {
        "serviceUrl": f"http://127.0.0.1:{broker.process.http_port}", "serviceUrlTls": broker.https,
        "brokerServiceUrl": broker.process.service_url, "brokerServiceUrlTls": broker.url_tls}) in (204, 409)
    assert broker.superuser("PUT", "/admin/v2/tenants/public",
                            {"adminRoles": [], "allowedClusters": ["standalone"]}) == 204
    for namespace in ("public/default", "public/default-2"):
        assert broker.superuser("PUT", f"/admin/v2/namespaces/{namespace}", {
            "auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}},
            "replication_clusters": ["standalone"]}) == 204
    assert broker.superuser("PUT", "/admin/v2/tenants/private",
                            {"adminRoles": [], "allowedClusters": ["standalone"]}) == 204
    assert broker.superuser("PUT", "/admin/v2/namespaces/private/auth", {"replication_clusters": ["standalone"]}) == 204
    for role in ("bystander", "bystander-magnetar"):
        assert broker.superuser("POST", f"/admin/v2/namespaces/private/auth/permissions/{role}",
                                ["produce", "consume"]) == 204


def test_the_broker_runs_from_a_pulsar_standalone_ssl_file(secured):
    """Must show 1: every listener of the file is up, the unsupported keys only warn, the setup took."""
    log = secured.log()
    assert f"pulsar+ssl://127.0.0.1:{secured.tls_port}" in log and secured.https in log
    assert "tlsEnabled" in log and "configurationStoreServers" in log  # listed in the one warning
    status, grants = secured.rest("GET", "/admin/v2/namespaces/private/auth/permissions",
                                  "Bearer " + secured.token("superUser"))
    both = ["consume", "produce"]
    assert (status, grants) == (200, {"bystander": both, "bystander-magnetar": both})


# ---- clients --------------------------------------------------------------------------------------------------


@pytest.fixture(params=["pulsar", "magnetar"])
def api(request):
    return importlib.import_module(request.param)


def connect(api, url: str, auth=None, ca=None, timeout_s: float = 15, broker: Secured | None = None):
    """A client of ``api`` (pulsar or magnetar) with the same options; ``broker`` gives the CA by default."""
    kwargs = {"operation_timeout_seconds": timeout_s}
    if api is pulsar:
        kwargs["logger"] = QUIET
    if auth is not None:
        kwargs["authentication"] = auth
    if url.startswith("pulsar+ssl://"):
        kwargs["tls_trust_certs_file_path"] = str(ca or broker.files.ca_path)
    return api.Client(url, **kwargs)


def topic_in(namespace: str) -> str:
    return f"persistent://{namespace}/m-{uuid.uuid4().hex[:10]}"


def produce_consume(client, topic: str, n: int = 3) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive_n(consumer, n)] == [f"m{i}".encode() for i in range(n)]
    producer.close()
    consumer.close()


def test_superuser_token_over_pulsar_ssl(secured, api):
    """Must show 2."""
    c = connect(api, secured.url_tls, api.AuthenticationToken(secured.token("superUser")), broker=secured)
    try:
        produce_consume(c, topic_in("private/auth"))
        if api is magnetar:  # the lookup sent it to the brokerServiceUrlTls: every connection it holds is TLS
            conns = list(c._async._connections.values())
            assert conns and all(conn.transport.get_extra_info("ssl_object") is not None for conn in conns)
    finally:
        c.close()


@pytest.mark.parametrize("namespace", ["public/default", "public/default-2"])
def test_the_anonymous_role_works_only_where_granted(secured, api, namespace):
    """Must show 3: no credentials is the anonymous role; the CI's two public namespaces grant it, private/auth
    does not (the refusal is an AuthorizationError naming the role, over TLS and plain alike)."""
    for url in (secured.url_tls, secured.process.service_url):
        c = connect(api, url, broker=secured)
        try:
            produce_consume(c, topic_in(namespace), 1)
            with pytest.raises(api.AuthorizationError):
                c.create_producer(topic_in("private/auth"))
            with pytest.raises(api.AuthorizationError):
                c.subscribe(topic_in("private/auth"), "s")
            if api is magnetar:  # the official client's exception does not carry the broker's message
                with pytest.raises(magnetar.AuthorizationError, match="role 'anonymous' is not allowed"):
                    c.create_producer(topic_in("private/auth"))
        finally:
            c.close()


def _refused(client, topic: str) -> bool:
    try:
        client.create_producer(topic).close()
        return False
    except (pulsar.AuthorizationError, magnetar.AuthorizationError):
        return True


def test_token_principal_is_refused_on_private_auth_until_granted_over_rest(secured, api):
    """Must show 4 (each client starts from no grant: the grant of the other parametrization is revoked first)."""
    path = "/admin/v2/namespaces/private/auth/permissions/token-principal"
    principal = "Bearer " + secured.token("token-principal")
    assert secured.superuser("DELETE", path) == 204
    topic = topic_in("private/auth")
    c = connect(api, secured.url_tls, api.AuthenticationToken(secured.token("token-principal")), broker=secured)
    try:
        wait_until(lambda: _refused(c, topic), REVOCATION_S, "token-principal to be refused")
        with pytest.raises(api.AuthorizationError):
            c.subscribe(topic, "s")
        assert secured.rest("POST", path, principal, ["produce", "consume"])[0] == 403  # it cannot grant itself
        assert _refused(c, topic)
        assert secured.superuser("POST", path, ["produce", "consume"]) == 204
        wait_until(lambda: not _refused(c, topic), REVOCATION_S, "the grant to reach the broker")
        produce_consume(c, topic)
    finally:
        c.close()


# ---- failures: each its own error, nobody else harmed ------------------------------------------------------------


class Bystander:
    """A client of each kind connected once for the module, with a live producer and consumer on private/auth
    (roles ``bystander`` and ``bystander-magnetar``, granted there by the setup)."""

    def __init__(self, broker: Secured):
        self.clients, self.pairs = [], []
        for api, role in ((pulsar, "bystander"), (magnetar, "bystander-magnetar")):
            client = connect(api, broker.url_tls, api.AuthenticationToken(broker.token(role)), broker=broker)
            topic = topic_in("private/auth")
            consumer = client.subscribe(topic, "bystander")
            self.clients.append(client)
            self.pairs.append((client.create_producer(topic), consumer))
        self.sent = 0

    def still_works(self) -> None:
        self.sent += 1
        for producer, consumer in self.pairs:
            producer.send(f"b{self.sent}".encode())
            assert receive_n(consumer, 1)[0].data() == f"b{self.sent}".encode()
        official_producer, official_consumer = self.pairs[0]
        assert official_producer.is_connected() and official_consumer.is_connected()

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture(scope="module")
def bystander(secured):
    b = Bystander(secured)
    yield b
    b.still_works()
    b.close()
    # one CONNECT each for the whole module: no failure case cost them their connection
    log = secured.log()
    assert log.count("authenticated as role 'bystander'") == 1
    assert log.count("authenticated as role 'bystander-magnetar'") == 1


# case: (url, auth, ca) makers, what magnetar raises (type, text), what the official client raises, and what the
# broker's log gains (the specific reason where the official client can only say Timeout)
FAILURES = {
    "wrong signature": dict(
        auth=lambda api, b: api.AuthenticationToken(b.token("token-principal", key=OTHER_KEY)),
        magnetar=(magnetar.AuthenticationError, "wrong signature"), pulsar=pulsar.Timeout, log="wrong signature"),
    "wrong signature over pulsar://": dict(
        url=lambda b: b.process.service_url,
        auth=lambda api, b: api.AuthenticationToken(b.token("token-principal", key=OTHER_KEY)),
        magnetar=(magnetar.AuthenticationError, "wrong signature"), pulsar=pulsar.Timeout, log="wrong signature"),
    "expired token": dict(
        auth=lambda api, b: api.AuthenticationToken(b.token("token-principal", expires_in_s=-10)),
        magnetar=(magnetar.AuthenticationError, "token expired"), pulsar=pulsar.Timeout, log="token expired"),
    "missing token": dict(  # no credentials: the anonymous role, which private/auth does not grant
        auth=lambda api, b: None,
        magnetar=(magnetar.AuthorizationError, "role 'anonymous' is not allowed"), pulsar=pulsar.AuthorizationError,
        log=None),
    "empty token": dict(
        auth=lambda api, b: api.AuthenticationToken(""),
        magnetar=(magnetar.AuthenticationError, "missing token"), pulsar=pulsar.Timeout, log="missing token"),
    "wrong CA": dict(
        ca=lambda b: b.files.other_ca_path,
        magnetar=(magnetar.ConnectError, "CERTIFICATE_VERIFY_FAILED"), pulsar=pulsar.ConnectError,
        # the official client sends the "unknown ca" alert, which the broker logs; magnetar's event loop closes
        # the socket without flushing the alert, so the broker sees only an EOF and there is nothing to log
        log="alert unknown ca", log_for=(pulsar,)),
    "plain client on the TLS port": dict(
        url=lambda b: f"pulsar://127.0.0.1:{b.tls_port}",
        # the broker answers the plain CONNECT with a TLS alert and closes: magnetar says so at once, the official
        # client retries until its operation timeout; the broker's log names the cause
        magnetar=(magnetar.ConnectError, r"cannot connect to 127\.0\.0\.1:\d+: the connection closed before the handshake"),
        pulsar=pulsar.Timeout,
        log="does not speak TLS"),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_each_failure_gets_its_specific_error_and_harms_no_other_connection(secured, bystander, api, case):
    """Must show 5 (the revoked permission is the next test)."""
    spec = FAILURES[case]
    bystander.still_works()
    url = spec.get("url", lambda b: b.url_tls)(secured)
    ca = spec.get("ca", lambda b: None)(secured)
    auth = spec.get("auth", lambda api, b: api.AuthenticationToken(b.token("token-principal")))(api, secured)
    log = spec["log"] if api in spec.get("log_for", (pulsar, magnetar)) else None
    before = secured.log().count(log) if log else 0
    c = connect(api, url, auth, ca=ca, timeout_s=SHORT_TIMEOUT_S if api is pulsar else 10, broker=secured)
    try:
        started = time.monotonic()
        if api is magnetar:
            error, text = spec["magnetar"]
            with pytest.raises(error, match=text):
                c.create_producer(topic_in("private/auth"))
            assert time.monotonic() - started < 5  # refused at once, not by a timeout
        else:
            with pytest.raises(spec["pulsar"]):
                c.create_producer(topic_in("private/auth"))
    finally:
        c.close()
    if log:
        wait_until(lambda: secured.log().count(log) > before, 10, f"the broker to log {log!r}")
    bystander.still_works()


def test_a_revoked_permission_closes_live_clients_within_5s_and_harms_no_one_else(secured, bystander, api):
    """Must show 5, the revoked permission: a namespace grant on private/auth is revoked over REST while the
    role has a live producer and consumer; the broker closes both (its log says so) within 5 s, the client
    cannot come back, and the bystander on the same namespace keeps its grant and its connection."""
    role = f"revokee-{api.__name__}"
    path = f"/admin/v2/namespaces/private/auth/permissions/{role}"
    assert secured.superuser("POST", path, ["produce", "consume"]) == 204
    topic = topic_in("private/auth")
    c = connect(api, secured.url_tls, api.AuthenticationToken(secured.token(role)), broker=secured)
    try:
        consumer = wait_until(lambda: None if _refused(c, topic) else c.subscribe(topic, "live"), REVOCATION_S,
                              "the grant to reach the broker")
        producer = c.create_producer(topic, send_timeout_millis=2000)
        producer.send(b"before")
        assert receive_n(consumer, 1)[0].data() == b"before"
        bystander.still_works()

        revoked_at = time.monotonic()
        assert secured.superuser("DELETE", path) == 204
        closed = (f"closing producer {producer.producer_name()!r} on {topic}: role {role!r} may no longer produce",
                  f"on {topic}: role {role!r} may no longer consume")
        wait_until(lambda: all(line in secured.log() for line in closed), REVOCATION_S,
                   "the broker to close the revoked role's producer and consumer")
        assert time.monotonic() - revoked_at < REVOCATION_S
        if api is pulsar:
            wait_until(lambda: not producer.is_connected() and not consumer.is_connected(), REVOCATION_S,
                       "the official client to see both closed")
        with pytest.raises(api.AuthorizationError):
            c.subscribe(topic, "again")
        with pytest.raises(api.PulsarException):
            producer.send(b"after")  # its reconnection is refused: nothing is stored
        with pytest.raises(api.Timeout):
            consumer.receive(timeout_millis=500)
        bystander.still_works()
    finally:
        c.close()


# ---- the admin REST over https: 401 for bad credentials, 403 for a role without the permission -------------------


def test_admin_rest_answers_401_and_403_along_the_matrix(secured):
    """Must show 6. Without credentials a request is the anonymous role (anonymousUserRole is set, as in the
    official CI), so it is 403 where anonymous has no right; credentials that are presented and bad are 401."""
    s = secured

    def bearer(role: str, **token_options) -> str:
        return "Bearer " + s.token(role, **token_options)

    def basic(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    grants = "/admin/v2/namespaces/private/auth/permissions"
    rows = [
        # (what, method, path, Authorization, client certificate, body, status, reason contains)
        ("superuser token", "GET", "/admin/v2/tenants", bearer("superUser"), None, None, 200, None),
        ("superuser basic", "GET", "/admin/v2/tenants", basic("admin", ADMIN_PASSWORD), None, None, 200, None),
        ("superuser client certificate", "GET", grants, None, s.files.client("admin"), None, 200, None),
        ("wrong signature", "GET", "/admin/v2/tenants", bearer("superUser", key=OTHER_KEY), None, None, 401,
         "wrong signature"),
        ("expired token", "GET", "/admin/v2/tenants", bearer("superUser", expires_in_s=-10), None, None, 401,
         "token expired"),
        ("empty token", "GET", "/admin/v2/tenants", "Bearer ", None, None, 401, "missing token"),
        ("wrong password", "GET", "/admin/v2/tenants", basic("admin", "wrong"), None, None, 401, "wrong password"),
        ("unknown scheme", "GET", "/admin/v2/tenants", "Negotiate abc", None, None, 401, "unsupported"),
        ("no credentials: anonymous", "GET", "/admin/v2/tenants", None, None, None, 403, "'anonymous'"),
        ("anonymous on private/auth", "GET", grants, None, None, None, 403, "'anonymous'"),
        ("token-principal lists tenants", "GET", "/admin/v2/tenants", bearer("token-principal"), None, None, 403,
         "'token-principal'"),
        ("token-principal grants itself", "POST", f"{grants}/token-principal", bearer("token-principal"), None,
         ["produce", "consume"], 403, "'token-principal'"),
        ("certificate role grants itself", "POST", f"{grants}/cert-user", None, s.files.client("cert-user"), None,
         403, "'cert-user'"),
        ("token-principal deletes a tenant", "DELETE", "/admin/v2/tenants/private", bearer("token-principal"), None,
         None, 403, "'token-principal'"),
        ("anonymous creates a namespace", "PUT", "/admin/v2/namespaces/private/mine", None, None, {}, 403,
         "'anonymous'"),
        ("lookup on private/auth, anonymous", "GET", "/lookup/v2/topic/persistent/private/auth/t", None, None, None,
         403, "'anonymous'"),
        ("lookup on public/default, anonymous", "GET", "/lookup/v2/topic/persistent/public/default/t", None, None,
         None, 200, None),
    ]
    for what, method, path, authorization, cert, body, status, reason in rows:
        got, answer = s.rest(method, path, authorization, body, cert=cert)
        assert got == status, f"{what}: {method} {path} answered {got} {answer}"
        if reason is not None:
            assert reason in answer["reason"], (what, answer)
    assert s.superuser("GET", "/admin/v2/namespaces/private/mine") == 404  # the refused requests changed nothing
    assert "cert-user" not in s.rest("GET", grants, "Bearer " + s.token("superUser"))[1]
    # the same over the wrong CA and over plain http on the https port: refused before any route runs
    with pytest.raises(urllib.error.URLError) as wrong_ca:
        s.rest("GET", "/admin/v2/tenants", "Bearer " + s.token("superUser"), cafile=s.files.other_ca_path)
    assert isinstance(wrong_ca.value.reason, ssl.SSLCertVerificationError)
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{s.https_port}/admin/v2/tenants", timeout=10)


# ---- basic auth, TLS client certificates and refreshing tokens -------------------------------------------------------


def test_basic_auth_over_pulsar_ssl(secured, api):
    """Must show 7, basic: the official suite's admin / 123456 (an apr1 line), a superuser; a wrong password gets
    its own error, as in the failure matrix."""
    c = connect(api, secured.url_tls, api.AuthenticationBasic("admin", ADMIN_PASSWORD), broker=secured)
    try:
        produce_consume(c, topic_in("private/auth"))
    finally:
        c.close()
    before = secured.log().count("unknown user or wrong password")
    c = connect(api, secured.url_tls, api.AuthenticationBasic("admin", "wrong"), broker=secured,
                timeout_s=SHORT_TIMEOUT_S if api is pulsar else 10)
    try:
        with pytest.raises(magnetar.AuthenticationError if api is magnetar else pulsar.Timeout):
            c.create_producer(topic_in("private/auth"))
    finally:
        c.close()
    assert secured.log().count("unknown user or wrong password") > before


def test_a_client_certificate_names_the_role(secured, api):
    """The TLS provider: a certificate with CN=admin is a superuser on private/auth; one with another CN is
    that role (refused there), not anonymous and not admin."""
    def client_for(cn):
        return connect(api, secured.url_tls, api.AuthenticationTLS(*secured.files.client(cn)), broker=secured)

    c = client_for("admin")
    try:
        produce_consume(c, topic_in("private/auth"), 1)
    finally:
        c.close()
    c = client_for("cert-user")
    try:
        with pytest.raises(api.AuthorizationError):
            c.create_producer(topic_in("private/auth"))
    finally:
        c.close()
    log = secured.log()
    assert "authenticated as role 'admin' by tls" in log and "authenticated as role 'cert-user' by tls" in log


def test_a_token_supplier_refreshes_an_expiring_token_on_the_same_connection(secured, api):
    """Must show 7, refresh: tokens that expire in 3 s, authenticationRefreshCheckSeconds=1 in the file; the
    broker challenges, the client's supplier gives a fresh token, and one connection (one CONNECT in the broker's
    log) keeps producing and consuming across two expiries."""
    role = f"refresher-{api.__name__}"
    assert secured.superuser("POST", f"/admin/v2/namespaces/private/auth/permissions/{role}",
                             ["produce", "consume"]) == 204
    issued: list[str] = []

    def supplier() -> str:
        issued.append(secured.token(role, expires_in_s=3))
        return issued[-1]

    c = connect(api, secured.url_tls, api.AuthenticationToken(supplier), broker=secured)
    try:
        topic = topic_in("private/auth")
        consumer = wait_until(lambda: None if _refused(c, topic) else c.subscribe(topic, "s"), REVOCATION_S,
                              "the grant")
        producer = c.create_producer(topic)
        sent: list[int] = []

        def refreshed_twice() -> bool:
            producer.send(str(len(sent)).encode())
            sent.append(len(sent))
            return secured.log().count(f"refreshed the credential of role '{role}'") >= 2

        wait_until(refreshed_twice, 30, "the broker to refresh the token twice", interval_s=0.2)
        assert [int(m.data()) for m in receive_n(consumer, len(sent))] == sent
    finally:
        c.close()
    log = secured.log()
    assert log.count(f"authenticated as role '{role}'") == 1  # one CONNECT: the connection was never replaced
    assert len(issued) >= 3 and f"closing the connection of role '{role}'" not in log
