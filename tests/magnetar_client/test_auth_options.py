"""The magnetar client's authentication and TLS options: what CONNECT and AUTH_RESPONSE carry, the URL and
option checks, and the answer to a broker's AUTH_CHALLENGE on a live connection.

The challenge test runs the client against a scripted peer on loopback that speaks the server side of the
session (magnetar.protocol.session): the broker's own challenge comes with authentication (tests/security).
"""

from __future__ import annotations

import asyncio
import ssl

import pulsar
import pytest

import magnetar
from magnetar.asyncio.client import AsyncClient
from magnetar.auth import MAX_AUTH_DATA_BYTES, auth_response_command, connect_command
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command
from magnetar.protocol.session import PulsarSession, Role, SessionState
from magnetar.tls import TlsOptions, client_context, parse_service_url

T = pb.BaseCommand


# ---- CONNECT and AUTH_RESPONSE -------------------------------------------------------------


@pytest.mark.parametrize("auth, method, data", [
    (None, None, None),
    (magnetar.AuthenticationToken("eyJ.a.b"), "token", b"eyJ.a.b"),
    (magnetar.AuthenticationToken(lambda: "  eyJ.from.supplier\n"), "token", b"eyJ.from.supplier"),
    (magnetar.AuthenticationBasic("alice", "s3cret:x"), "basic", b"alice:s3cret:x"),
    (magnetar.AuthenticationBasic(auth_params_string='{"username": "bob", "password": "pw"}'), "basic", b"bob:pw"),
    (magnetar.AuthenticationBasic("carol", "pw", method="oms3.0"), "oms3.0", b"carol:pw"),
    (magnetar.AuthenticationTLS("/c.pem", "/k.pem"), "tls", b""),
])
def test_connect_carries_the_method_and_credentials(auth, method, data):
    connect = connect_command("v", 20, auth)
    # What goes on the wire: decode the encoded frame's CONNECT.
    wire = pb.BaseCommand.FromString(command(T.CONNECT, connect=connect).SerializeToString()).connect
    assert (wire.client_version, wire.protocol_version) == ("v", 20)
    assert wire.feature_flags.supports_auth_refresh  # else a broker closes it when a token expires
    if method is None:
        assert not wire.HasField("auth_method_name") and not wire.HasField("auth_data")
    else:
        assert (wire.auth_method_name, wire.auth_data) == (method, data)


def test_a_token_supplier_is_asked_again_for_each_challenge():
    tokens = iter(["first", "second", "third"])
    auth = magnetar.AuthenticationToken(lambda: next(tokens))
    assert connect_command("v", 20, auth).auth_data == b"first"
    challenge = pb.CommandAuthChallenge(challenge=pb.AuthData(auth_method_name="token", auth_data=b"refresh"))
    first = auth_response_command("v", 20, auth, challenge)
    second = auth_response_command("v", 20, auth, challenge)
    assert (first.response.auth_method_name, first.response.auth_data) == ("token", b"second")
    assert second.response.auth_data == b"third"


@pytest.mark.parametrize("make, error", [
    (lambda: magnetar.AuthenticationToken(42), "token is expected"),
    (lambda: magnetar.AuthenticationTLS("/c.pem", None), "private_key_path"),
    (lambda: magnetar.AuthenticationBasic("alice", None), "password"),
    (lambda: magnetar.AuthenticationBasic("a:b", "pw"), "cannot contain ':'"),
    (lambda: magnetar.AuthenticationBasic(auth_params_string='{"username": "x"}'), "username and password"),
])
def test_bad_authentication_arguments(make, error):
    with pytest.raises(ValueError, match=error):
        make()


def test_credentials_are_bounded_and_a_supplier_must_return_text():
    with pytest.raises(magnetar.InvalidConfiguration, match="over the"):
        connect_command("v", 20, magnetar.AuthenticationToken("x" * (MAX_AUTH_DATA_BYTES + 1)))
    with pytest.raises(magnetar.InvalidConfiguration, match="returned bytes"):
        connect_command("v", 20, magnetar.AuthenticationToken(lambda: b"bytes"))


# ---- URLs and options ----------------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("pulsar://127.0.0.1:6650", ("127.0.0.1:6650", False)),
    ("pulsar://broker.example:6650/", ("broker.example:6650", False)),
    ("pulsar+ssl://localhost:6651", ("localhost:6651", True)),
])
def test_service_urls(url, expected):
    assert parse_service_url(url) == expected


@pytest.mark.parametrize("url", ["http://localhost:6650", "pulsar+ssl://localhost", "pulsar://:6650", "6650"])
def test_bad_service_urls(url):
    with pytest.raises(ValueError, match="pulsar://host:port or pulsar\\+ssl://host:port"):
        parse_service_url(url)


def test_unsupported_options_raise_instead_of_being_ignored():
    with pytest.raises(magnetar.InvalidConfiguration, match="io_threads, logger"):
        magnetar.Client("pulsar://127.0.0.1:6650", io_threads=4, logger=None)


def test_option_checks():
    with pytest.raises(ValueError, match="magnetar authentication"):
        magnetar.Client("pulsar://127.0.0.1:6650", authentication=pulsar.AuthenticationToken("t"))
    with pytest.raises(magnetar.InvalidConfiguration, match="needs a pulsar\\+ssl://"):
        magnetar.Client("pulsar://127.0.0.1:6650", authentication=magnetar.AuthenticationTLS("/c.pem", "/k.pem"))
    with pytest.raises(ValueError, match="tls_validate_hostname"):
        magnetar.Client("pulsar+ssl://127.0.0.1:6651", tls_validate_hostname="yes")
    with pytest.raises(ValueError, match="go together"):
        magnetar.Client("pulsar+ssl://127.0.0.1:6651", tls_certificate_file_path="/c.pem")
    with pytest.raises(magnetar.InvalidConfiguration, match="cannot load tls_trust_certs_file_path /nonexistent"):
        magnetar.Client("pulsar+ssl://127.0.0.1:6651", tls_trust_certs_file_path="/nonexistent/ca.pem")


def test_tls_context_follows_the_options(tls_files):
    strict = client_context(TlsOptions(str(tls_files.ca_path), validate_hostname=True))
    assert (strict.verify_mode, strict.check_hostname) == (ssl.CERT_REQUIRED, True)
    default = client_context(TlsOptions(str(tls_files.ca_path)))
    assert (default.verify_mode, default.check_hostname) == (ssl.CERT_REQUIRED, False)  # pulsar-client's default
    insecure = client_context(TlsOptions(allow_insecure_connection=True))
    assert (insecure.verify_mode, insecure.check_hostname) == (ssl.CERT_NONE, False)
    with pytest.raises(magnetar.InvalidConfiguration, match="cannot load the client certificate"):
        client_context(TlsOptions(str(tls_files.ca_path)), ("/missing.pem", "/missing.key"))


# ---- AUTH_CHALLENGE on a live connection -----------------------------------------------------


class _ChallengingPeer(asyncio.Protocol):
    """The server side of a session: answers CONNECT, then challenges the live session once."""

    def __init__(self, seen: asyncio.Queue):
        self.session = PulsarSession(Role.SERVER)
        self.seen = seen

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.session.receive_data(data)
        while (frame := self.session.next_event()) is not None:
            frame = getattr(frame, "frame", frame)
            cmd = frame.command
            self.seen.put_nowait(cmd)
            if cmd.type == T.CONNECT:
                self._send(T.CONNECTED, connected=pb.CommandConnected(server_version="peer", protocol_version=20))
                self._send(T.AUTH_CHALLENGE, authChallenge=pb.CommandAuthChallenge(
                    server_version="peer", protocol_version=20,
                    challenge=pb.AuthData(auth_method_name="token", auth_data=b"refresh")))

    def _send(self, type_, **fields):
        self.transport.write(self.session.send(command(type_, **fields)))


async def test_client_answers_a_challenge_on_a_connected_session_with_a_fresh_token():
    seen: asyncio.Queue = asyncio.Queue()
    peer = None

    def factory():
        nonlocal peer
        peer = _ChallengingPeer(seen)
        return peer

    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    calls = []

    def supplier():
        calls.append(len(calls))
        return f"token-{len(calls)}"

    client = AsyncClient(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10,
                         authentication=magnetar.AuthenticationToken(supplier))
    try:
        conn = await client.connection(f"127.0.0.1:{port}")
        connect = await asyncio.wait_for(seen.get(), 10)
        assert (connect.type, connect.connect.auth_method_name, connect.connect.auth_data) == \
            (T.CONNECT, "token", b"token-1")
        answer = await asyncio.wait_for(seen.get(), 10)
        assert answer.type == T.AUTH_RESPONSE
        assert (answer.authResponse.response.auth_method_name, answer.authResponse.response.auth_data) == \
            ("token", b"token-2")
        assert len(calls) == 2
        assert conn.session.state is SessionState.CONNECTED and not conn.closed
        assert peer.session.state is SessionState.CONNECTED
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
