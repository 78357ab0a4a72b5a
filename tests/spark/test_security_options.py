"""The Spark source and sink's authentication and TLS options (pulsar-spark's names) mapped onto magnetar's.

Pure tests of the mapping, then one real Spark read and write over pulsar+ssl:// and https against a TLS broker.
"""

from __future__ import annotations

import base64
import ssl
import uuid

import pulsar
import pytest

import magnetar
from connectors.spark.options import MagnetarOptionError, parse_sink_options, parse_source_options
from connectors.spark.security import BASIC, TLS, TOKEN
from tests.official_client.support import receive_n

PLAIN = {"service.url": "pulsar://localhost:6650", "topic": "t"}
SECURE = {"service.url": "pulsar+ssl://localhost:6651", "topic": "t"}


def _auth(options: dict):
    return parse_source_options(options).security.client_options()["authentication"]


def test_token_params(tmp_path):
    inline = _auth({**PLAIN, "pulsar.client.authPluginClassName": TOKEN, "pulsar.client.authParams": "token:eyJ.a.b"})
    assert isinstance(inline, magnetar.AuthenticationToken) and inline.auth_data() == b"eyJ.a.b"
    bare = _auth({**PLAIN, "pulsar.client.authPluginClassName": TOKEN, "pulsar.client.authParams": "eyJ.c.d"})
    assert bare.auth_data() == b"eyJ.c.d"
    token_file = tmp_path / "token.jwt"
    token_file.write_text("eyJ.first\n")
    from_file = _auth({**PLAIN, "pulsar.client.authPluginClassName": TOKEN,
                       "pulsar.client.authParams": f"file://{token_file}"})
    assert from_file.auth_data() == b"eyJ.first"
    token_file.write_text("eyJ.rotated\n")  # read again whenever the broker asks
    assert from_file.auth_data() == b"eyJ.rotated"


def test_tls_params_in_both_java_formats():
    for params in ("tlsCertFile:/c.pem,tlsKeyFile:/k.pem", '{"tlsCertFile": "/c.pem", "tlsKeyFile": "/k.pem"}'):
        auth = _auth({**SECURE, "pulsar.client.authPluginClassName": TLS, "pulsar.client.authParams": params})
        assert isinstance(auth, magnetar.AuthenticationTLS)
        assert auth.client_certificate() == ("/c.pem", "/k.pem")


def test_basic_params_and_the_admin_header():
    options = {**PLAIN, "pulsar.client.authPluginClassName": BASIC,
               "pulsar.client.authParams": '{"userId": "alice", "password": "pw:1"}'}
    auth = _auth(options)
    assert isinstance(auth, magnetar.AuthenticationBasic) and auth.auth_data() == b"alice:pw:1"
    assert parse_source_options(options).security.http_headers() == {
        "Authorization": "Basic " + base64.b64encode(b"alice:pw:1").decode()}
    token = parse_sink_options({**PLAIN, "pulsar.client.authPluginClassName": TOKEN,
                                "pulsar.client.authParams": "token:abc"})
    assert token.security.http_headers() == {"Authorization": "Bearer abc"}


def test_tls_options_and_the_https_default_admin_url(tls_files):
    options = parse_source_options({**SECURE, "pulsar.client.tlsTrustCertsFilePath": str(tls_files.ca_path),
                                    "pulsar.client.tlsHostnameVerificationEnable": "true",
                                    "pulsar.client.tlsAllowInsecureConnection": "false"})
    assert options.admin_url == "https://localhost:8443"
    assert options.security.client_options() == {
        "authentication": None, "tls_trust_certs_file_path": str(tls_files.ca_path),
        "tls_allow_insecure_connection": False, "tls_validate_hostname": True}
    ctx = options.security.ssl_context()
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert parse_source_options(PLAIN).security.client_options()["authentication"] is None


@pytest.mark.parametrize("options, message", [
    ({"pulsar.client.authPluginClassName": "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2",
      "pulsar.client.authParams": "{}"}, "is not supported; magnetar implements"),
    ({"pulsar.client.authParams": "token:x"}, "needs 'pulsar.client.authPluginClassName'"),
    ({"pulsar.client.authPluginClassName": TOKEN, "pulsar.client.authParams": "token:"}, "token:<jwt>"),
    ({"pulsar.client.authPluginClassName": TOKEN, "pulsar.client.authParams": "file:///no/such.jwt"}, "does not exist"),
    ({"pulsar.client.authPluginClassName": TLS, "pulsar.client.authParams": "tlsCertFile:/c.pem"},
     "missing tlsKeyFile"),
    ({"pulsar.client.authPluginClassName": BASIC, "pulsar.client.authParams": "alice:pw"}, "must be JSON"),
    ({"pulsar.client.tlsAllowInsecureConnection": "maybe"}, "must be true or false"),
])
def test_bad_security_options(options, message):
    with pytest.raises(MagnetarOptionError, match=message):
        parse_source_options({**SECURE, **options})


def test_tls_authentication_needs_a_tls_url():
    with pytest.raises(MagnetarOptionError, match="must be pulsar\\+ssl://"):
        parse_sink_options({**PLAIN, "pulsar.client.authPluginClassName": TLS,
                            "pulsar.client.authParams": "tlsCertFile:/c.pem,tlsKeyFile:/k.pem"})


# ---- real Spark over TLS ------------------------------------------------------------------------


def test_spark_reads_and_writes_over_tls(spark, tls_standalone, tls_files, tmp_path):
    topic = f"persistent://public/default/spark-tls-{uuid.uuid4().hex[:8]}"
    out = f"persistent://public/default/spark-tls-out-{uuid.uuid4().hex[:8]}"
    cert, key = tls_files.client("spark")
    security = {"service.url": tls_standalone.service_url_tls, "admin.url": tls_standalone.web_url_tls,
                "pulsar.client.tlsTrustCertsFilePath": str(tls_files.ca_path),
                "pulsar.client.tlsHostnameVerificationEnable": "true",
                "pulsar.client.authPluginClassName": TLS,
                "pulsar.client.authParams": f"tlsCertFile:{cert},tlsKeyFile:{key}"}
    client = pulsar.Client(tls_standalone.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca_path),
                           operation_timeout_seconds=15, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"v-{i}".encode())
        producer.close()
        reader = spark.read.format("magnetar")
        for name, value in security.items():
            reader = reader.option(name, value)
        frame = reader.option("topic", topic).load()
        assert sorted(r.value for r in frame.select("value").collect()) == sorted(f"v-{i}".encode() for i in range(20))
        consumer = client.subscribe(out, "check")
        writer = frame.select("value").write.format("magnetar")
        for name, value in security.items():
            if name != "admin.url":
                writer = writer.option(name, value)
        writer.option("topic", out).mode("append").save()
        got = sorted(m.data() for m in receive_n(consumer, 20))
        assert got == sorted(f"v-{i}".encode() for i in range(20))
    finally:
        client.close()
