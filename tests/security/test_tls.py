"""TLS on the broker: pulsar+ssl:// and https beside the plain listeners, with the official client as the peer.

Certificates are made per run (tests/fixtures/security.py). Every failure case also checks that it harmed
nothing else: a good TLS client and a plain client keep working on the same broker.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.request
import uuid

import pulsar
import pytest

from broker.config import BrokerConfig
from broker.security.tls import check_config, client_cert_mode, handshake_failure, server_context
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import FrameDecoder, command, encode_command
from storage.testing.waiting import wait_until
from tests.fixtures.security import start_tls_standalone
from tests.official_client.support import receive_n

T = pb.BaseCommand
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _topic(name: str) -> str:
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"


def _produce_consume(client, topic: str, n: int = 5) -> list[bytes]:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m-{i}".encode())
    got = [m.data() for m in receive_n(consumer, n)]
    producer.close()
    consumer.close()
    return got


def _assert_still_serving(broker, tls_files) -> None:
    """A good TLS client and a plain client both produce and consume: a failed peer harmed nobody."""
    good = pulsar.Client(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                         operation_timeout_seconds=15, logger=QUIET)
    plain = pulsar.Client(broker.service_url, operation_timeout_seconds=15, logger=QUIET)
    try:
        assert _produce_consume(good, _topic("after-tls")) == [f"m-{i}".encode() for i in range(5)]
        assert _produce_consume(plain, _topic("after-plain")) == [f"m-{i}".encode() for i in range(5)]
    finally:
        good.close()
        plain.close()


def _handshake_failures(broker) -> list[str]:
    return [line for line in broker.process.log_path.read_text(errors="replace").splitlines()
            if "TLS handshake failed" in line]


# ---- pure: the client-certificate decision and the config checks ---------------------------


@pytest.mark.parametrize("trust, require, insecure, expected", [
    (False, False, False, ssl.CERT_NONE),
    (True, False, False, ssl.CERT_OPTIONAL),
    (True, True, False, ssl.CERT_REQUIRED),
    (True, False, True, ssl.CERT_NONE),
    (False, False, True, ssl.CERT_NONE),
])
def test_client_cert_mode(trust, require, insecure, expected):
    assert client_cert_mode(trust, require, insecure) is expected


@pytest.mark.parametrize("trust, require, insecure, message", [
    (True, True, True, "contradict"),
    (False, True, False, "needs tls_trust_certs_file_path"),
])
def test_client_cert_mode_refuses_contradictions(trust, require, insecure, message):
    with pytest.raises(ValueError, match=message):
        client_cert_mode(trust, require, insecure)


@pytest.mark.parametrize("changes, message", [
    ({"tls_port": 6651}, "tls_certificate_file_path is needed"),
    ({"https_port": 8443, "tls_certificate_file_path": "c.pem"}, "tls_key_file_path is needed"),
    ({"tls_port": 70000, "tls_certificate_file_path": "c", "tls_key_file_path": "k"}, "tls_port must be in"),
    ({"port": None}, "no Pulsar port"),
    ({"http_port": None}, "no HTTP port"),
])
def test_config_checks(changes, message):
    with pytest.raises(ValueError, match=message):
        BrokerConfig(metadata_store_url="memory://", **changes).validate()


def test_config_tls_only_is_valid_and_named_by_the_tls_port(tls_files):
    config = BrokerConfig(metadata_store_url="memory://", port=None, http_port=None, tls_port=6651, https_port=8443,
                          tls_certificate_file_path=str(tls_files.server_cert_path),
                          tls_key_file_path=str(tls_files.server_key_path)).validate()
    check_config(config)
    assert (config.service_url, config.service_url_tls) == (None, "pulsar+ssl://127.0.0.1:6651")
    assert (config.web_service_url, config.web_service_url_tls) == (None, "https://127.0.0.1:8443")
    assert config.broker_id == "127.0.0.1:6651"
    assert server_context(config).verify_mode is ssl.CERT_NONE


def test_server_context_names_a_key_that_does_not_match(tls_files, tmp_path):
    other = tls_files.client("mismatch")
    config = BrokerConfig(metadata_store_url="memory://", tls_port=0,
                          tls_certificate_file_path=str(tls_files.server_cert_path), tls_key_file_path=other[1])
    with pytest.raises(ValueError, match="cannot load the broker certificate"):
        server_context(config)


def test_handshake_failure_says_plain_text():
    exc = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    exc.reason = "WRONG_VERSION_NUMBER"
    assert "does not speak TLS" in handshake_failure(exc)


# ---- real broker, official client ------------------------------------------------------------


def test_official_client_produces_and_consumes_over_pulsar_ssl(tls_standalone, tls_files):
    client = pulsar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                           operation_timeout_seconds=15, logger=QUIET)
    try:
        assert _produce_consume(client, _topic("tls")) == [f"m-{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_official_client_with_hostname_validation(tls_standalone, tls_files):
    url = f"pulsar+ssl://localhost:{tls_standalone.tls_port}"
    client = pulsar.Client(url, tls_trust_certs_file_path=str(tls_files.ca_path), tls_validate_hostname=True,
                           operation_timeout_seconds=15, logger=QUIET)
    try:
        assert _produce_consume(client, _topic("tls-hostname"), 2) == [b"m-0", b"m-1"]
    finally:
        client.close()


def test_wrong_ca_fails_with_a_tls_error_and_harms_nobody(tls_standalone, tls_files):
    before = len(_handshake_failures(tls_standalone))
    client = pulsar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.other_ca_path),
                           operation_timeout_seconds=3, logger=QUIET)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic("wrong-ca"))
    finally:
        client.close()
    # The client aborts the handshake with an alert: the broker logs that handshake's failure.
    wait_until(lambda: len(_handshake_failures(tls_standalone)) > before, 10, "the failed handshake in the log")
    # The same failure over a stdlib socket shows the client side's error is a certificate verification one.
    ctx = ssl.create_default_context(cafile=str(tls_files.other_ca_path))
    with socket.create_connection(("127.0.0.1", tls_standalone.tls_port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    _assert_still_serving(tls_standalone, tls_files)


def test_plain_client_on_the_tls_port_is_closed_and_logged_once(tls_standalone, tls_files):
    before = len(_handshake_failures(tls_standalone))
    with socket.create_connection(("127.0.0.1", tls_standalone.tls_port), timeout=10) as sock:
        sock.sendall(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="plain",
                                                                                 protocol_version=20))))
        # Nothing the client could read as Pulsar comes back: a TLS alert record (0x15) at most, then the close.
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        assert received == b"" or received[0] == 0x15, received
    wait_until(lambda: len(_handshake_failures(tls_standalone)) == before + 1, 10, "one logged handshake failure")
    assert "does not speak TLS" in _handshake_failures(tls_standalone)[-1]
    # The official client (plain) pointed at the TLS port fails too.
    client = pulsar.Client(f"pulsar://127.0.0.1:{tls_standalone.tls_port}", operation_timeout_seconds=3, logger=QUIET)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic("plain-on-tls"))
    finally:
        client.close()
    _assert_still_serving(tls_standalone, tls_files)


def test_client_certificate_from_another_ca_is_refused(tls_standalone, tls_files, tmp_path):
    """Client certificates are optional on this broker, but one that is presented must chain to its CA."""
    import trustme

    stranger = trustme.CA().issue_cert("mallory.clients.test", common_name="mallory")
    cert, key = tmp_path / "mallory.pem", tmp_path / "mallory.key.pem"
    stranger.cert_chain_pems[0].write_to_path(cert)
    stranger.private_key_pem.write_to_path(key)
    ctx = ssl.create_default_context(cafile=str(tls_files.ca_path))
    ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", tls_standalone.tls_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            # TLS 1.3: the server judges the client certificate after the client's handshake returns; its
            # refusal arrives as an alert on the first read.
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                tls.sendall(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="m",
                                                                                        protocol_version=20))))
                if not tls.recv(4096):
                    raise ConnectionResetError("closed")
    trusted = pulsar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                            authentication=pulsar.AuthenticationTLS(*tls_files.client("alice")),
                            operation_timeout_seconds=15, logger=QUIET)
    try:
        assert _produce_consume(trusted, _topic("client-cert"), 2) == [b"m-0", b"m-1"]
    finally:
        trusted.close()


def _https_json(url: str, cafile: str):
    ctx = ssl.create_default_context(cafile=cafile)
    with urllib.request.urlopen(url, timeout=15, context=ctx) as resp:
        return resp.status, json.loads(resp.read())


def test_https_admin_and_lookup_answer_with_the_tls_urls(tls_standalone, tls_files):
    status, tenants = _https_json(f"{tls_standalone.web_url_tls}/admin/v2/tenants", str(tls_files.ca_path))
    assert status == 200 and "public" in tenants
    topic = _topic("https-lookup").split("://", 1)[1]
    status, found = _https_json(f"{tls_standalone.web_url_tls}/lookup/v2/topic/persistent/{topic}",
                                str(tls_files.ca_path))
    assert status == 200
    assert found["brokerUrlTls"] == tls_standalone.service_url_tls
    assert found["httpUrlTls"] == tls_standalone.web_url_tls
    assert found["brokerUrl"] == tls_standalone.service_url
    with pytest.raises(urllib.error.URLError) as refused:
        _https_json(f"{tls_standalone.web_url_tls}/admin/v2/tenants", str(tls_files.other_ca_path))
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)


def test_the_console_and_its_rest_over_https(tls_standalone, tls_files):
    ctx = ssl.create_default_context(cafile=str(tls_files.ca_path))
    with urllib.request.urlopen(f"{tls_standalone.web_url_tls}/console/", timeout=15, context=ctx) as resp:
        assert resp.status == 200 and b"<title>Magnetar console</title>" in resp.read()
    status, doc = _https_json(f"{tls_standalone.web_url_tls}/admin/magnetar/v1/bookies", str(tls_files.ca_path))
    assert status == 200 and len(doc["bookies"]) == 3


def test_binary_lookup_carries_both_urls(tls_standalone, tls_files):
    ctx = ssl.create_default_context(cafile=str(tls_files.ca_path))
    with socket.create_connection(("127.0.0.1", tls_standalone.tls_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            decoder = FrameDecoder()

            def reply():
                frames = []
                while not frames:
                    data = sock.recv(65536)
                    assert data, "broker closed the connection"
                    frames = decoder.feed(data)
                return frames[0].command

            sock.sendall(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="raw",
                                                                                     protocol_version=20))))
            assert reply().type == T.CONNECTED
            sock.sendall(encode_command(command(T.LOOKUP, lookupTopic=pb.CommandLookupTopic(
                topic=_topic("binary-lookup"), request_id=1))))
            answer = reply()
    assert answer.type == T.LOOKUP_RESPONSE
    assert answer.lookupTopicResponse.brokerServiceUrlTls == tls_standalone.service_url_tls
    assert answer.lookupTopicResponse.brokerServiceUrl == tls_standalone.service_url


def test_required_client_certificate(tmp_path, tls_files):
    """tls_require_trusted_client_cert_on_connect: a client without a certificate is refused at the handshake."""
    broker = start_tls_standalone(tmp_path / "require", tls_files, tls_require_trusted_client_cert_on_connect=True)
    try:
        bare = pulsar.Client(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                             operation_timeout_seconds=3, logger=QUIET)
        try:
            with pytest.raises(pulsar.PulsarException):
                bare.create_producer(_topic("no-cert"))
        finally:
            bare.close()
        with_cert = pulsar.Client(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                                  authentication=pulsar.AuthenticationTLS(*tls_files.client("alice")),
                                  operation_timeout_seconds=15, logger=QUIET)
        try:
            assert _produce_consume(with_cert, _topic("cert"), 2) == [b"m-0", b"m-1"]
        finally:
            with_cert.close()
        import magnetar

        bare = magnetar.Client(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                               operation_timeout_seconds=5)
        try:
            with pytest.raises((magnetar.ConnectError, magnetar.Timeout)):
                bare.create_producer(_topic("magnetar-no-cert"))
        finally:
            bare.close()
        with_cert = magnetar.Client(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                                    authentication=magnetar.AuthenticationTLS(*tls_files.client("alice")),
                                    operation_timeout_seconds=15)
        try:
            assert _produce_consume(with_cert, _topic("magnetar-cert"), 2) == [b"m-0", b"m-1"]
        finally:
            with_cert.close()
    finally:
        broker.process.stop()


# ---- the magnetar client over TLS ------------------------------------------------------------------


def test_magnetar_produces_and_consumes_over_pulsar_ssl(tls_standalone, tls_files):
    import magnetar

    client = magnetar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                             tls_validate_hostname=True, operation_timeout_seconds=15)
    try:
        assert _produce_consume(client, _topic("magnetar-tls")) == [f"m-{i}".encode() for i in range(5)]
        # Every connection it holds is TLS: the lookup sent it to the brokerServiceUrlTls.
        conns = list(client._async._connections.values())
        assert conns and all(c.transport.get_extra_info("ssl_object") is not None for c in conns)
        assert {c.address for c in conns} == {f"127.0.0.1:{tls_standalone.tls_port}"}
    finally:
        client.close()


def test_magnetar_with_the_wrong_ca_fails_with_a_certificate_error(tls_standalone, tls_files):
    import magnetar

    client = magnetar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.other_ca_path),
                             operation_timeout_seconds=5)
    try:
        with pytest.raises(magnetar.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            client.create_producer(_topic("magnetar-wrong-ca"))
    finally:
        client.close()
    _assert_still_serving(tls_standalone, tls_files)


def test_magnetar_plain_client_on_the_tls_port_fails(tls_standalone, tls_files):
    import magnetar

    client = magnetar.Client(f"pulsar://127.0.0.1:{tls_standalone.tls_port}", operation_timeout_seconds=5)
    try:
        with pytest.raises((magnetar.ConnectError, magnetar.Timeout)):
            client.create_producer(_topic("magnetar-plain-on-tls"))
    finally:
        client.close()
    _assert_still_serving(tls_standalone, tls_files)


# ---- a TLS-only broker (in process: no plain listener to reach it by) ---------------------------


async def test_tls_only_broker_serves_pulsar_ssl_and_https_and_nothing_plain(tmp_path, tls_files):
    import asyncio

    from broker.http import listening_ports, start_http
    from broker.standalone import Standalone, metadata_url
    from magnetar.asyncio import Client as AsyncClient
    from storage.testing.processes import free_port_block

    data_dir = tmp_path / "data"
    config = BrokerConfig(
        metadata_store_url=metadata_url(data_dir), port=None, http_port=None, tls_port=0, https_port=0, stream_port=None,
        tls_certificate_file_path=str(tls_files.server_cert_path), tls_key_file_path=str(tls_files.server_key_path),
        tls_trust_certs_file_path=str(tls_files.ca_path)).validate()
    standalone = await Standalone.start(data_dir, config, free_port_block(3))
    http = None
    try:
        broker = standalone.broker
        http = await start_http(broker, config.host, config.http_port, config.https_port)
        http_port, https_port = listening_ports(http)
        assert http_port is None and https_port
        assert broker.port is None and broker.service_url is None and broker.tls_port
        assert broker.ownership.me.broker_id == f"127.0.0.1:{broker.tls_port}"

        client = AsyncClient(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                             operation_timeout_seconds=15)
        try:
            topic = _topic("tls-only")
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            await producer.send(b"only-tls")
            assert (await consumer.receive(10_000)).data() == b"only-tls"
        finally:
            await client.close()

        def https_lookup():
            return _https_json(f"https://127.0.0.1:{https_port}/lookup/v2/topic/persistent/"
                               f"{topic.split('://', 1)[1]}", str(tls_files.ca_path))

        status, found = await asyncio.to_thread(https_lookup)
        assert status == 200
        assert (found["brokerUrl"], found["brokerUrlTls"]) == ("", broker.service_url_tls)
        assert found["httpUrl"] == "" and found["httpUrlTls"].startswith("https://127.0.0.1:")
        # A plain client of this broker has nowhere to go: the lookup offers it no pulsar:// URL.
        plain = AsyncClient(f"pulsar+ssl://127.0.0.1:{broker.tls_port}",
                            tls_trust_certs_file_path=str(tls_files.ca_path), operation_timeout_seconds=15)
        plain.use_tls = False  # a client of the plain scheme reading the same answer
        try:
            import magnetar

            with pytest.raises(magnetar.ConnectError, match="has no pulsar:// listener"):
                await plain.lookup(topic)
        finally:
            await plain.close()
    finally:
        if http is not None:
            await http.cleanup()
        await standalone.stop()


def test_tls_only_broker_from_a_pulsar_properties_file(tmp_path, tls_files):
    """`broker standalone --config standalone.conf` with `brokerServicePort=` empty: pulsar+ssl:// only, in a
    real process; the plain port is not listened on and the ready line names the TLS listeners."""
    from storage.testing.processes import BrokerProcess, free_port

    tls_port, https_port = free_port(), free_port()
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "brokerServicePort=\n"
        f"brokerServicePortTls={tls_port}\n"
        f"webServicePortTls={https_port}\n"
        f"tlsCertificateFilePath={tls_files.server_cert_path}\n"
        f"tlsKeyFilePath={tls_files.server_key_path}\n"
        f"tlsTrustCertsFilePath={tls_files.ca_path}\n")

    class TlsOnly(BrokerProcess):
        def command(self):  # the harness's --port would turn the plain listener back on
            argv = super().command()
            i = argv.index("--port")
            return argv[:i] + argv[i + 2:]

    process = TlsOnly(tmp_path / "data", extra_args=["--config", str(conf)])
    try:
        process.start(timeout_s=60)
        ready = wait_until(lambda: next((line for line in process.log_path.read_text().splitlines()
                                         if " ready (" in line), None), 10, "the ready line")
        assert f"broker 127.0.0.1:{tls_port} ready (http://127.0.0.1:{process.http_port}, " \
               f"pulsar+ssl://127.0.0.1:{tls_port}, https://127.0.0.1:{https_port};" in ready
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", process.port), timeout=5).close()
        client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{tls_port}", tls_trust_certs_file_path=str(tls_files.ca_path),
                               operation_timeout_seconds=15, logger=QUIET)
        try:
            assert _produce_consume(client, _topic("tls-only-process"), 3) == [b"m-0", b"m-1", b"m-2"]
        finally:
            client.close()
    finally:
        process.stop()


def test_a_broker_whose_key_does_not_load_refuses_to_start(tmp_path, tls_files):
    import subprocess
    import sys
    from pathlib import Path

    from storage.testing.processes import free_port, free_port_block

    config = tmp_path / "broker.toml"
    config.write_text(f'tls_port = {free_port()}\ntls_certificate_file_path = "{tls_files.server_cert_path}"\n'
                      f'tls_key_file_path = "{tmp_path / "missing.key.pem"}"\n')
    broker = Path(sys.executable).parent / "broker"
    result = subprocess.run([str(broker), "standalone", "--data-dir", str(tmp_path / "data"), "--config", str(config),
                             "--port", str(free_port()), "--http-port", str(free_port()),
                             "--bookie-port", str(free_port_block(3)), "--bookie-http-port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "cannot load the broker certificate" in result.stderr and "missing.key.pem" in result.stderr
