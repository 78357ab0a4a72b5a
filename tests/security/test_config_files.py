"""Configuration in Pulsar's shape: properties files, advertised listeners and the clusters admin routes.

Real `broker standalone` processes started from Pulsar-style files; the official client is the peer. The
listener test puts a counting TCP forwarder on a second loopback address (127.0.0.2) behind the "external"
listener, so it sees whether the client really dialled the address of the listener it named.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
import trustme

from broker.config import load_config
from broker.ownership.bundles import NamespaceBundles
from storage.testing.processes import VENV_BIN, BrokerProcess, free_port, stop_all
from storage.testing.waiting import wait_until
from tests.cluster.support import topics_in
from tests.official_client.support import admin_call, payloads, receive_n

# Settings a real Pulsar standalone-ssl.conf carries that Magnetar does not have: they must not stop the broker.
UNSUPPORTED = """\
configurationStoreServers=
zooKeeperOperationTimeoutSeconds=30
brokerShutdownTimeoutMs=3000
backlogQuotaCheckEnabled=true
backlogQuotaDefaultLimitGB=10
clientLibraryVersionCheckEnabled=false
statusFilePath=/usr/local/apache/htdocs
subscriptionRedeliveryTrackerEnabled=true
tlsEnabled=true
acknowledgmentAtBatchIndexLevelEnabled=true
bookkeeperClientTimeoutInSeconds=30
bookkeeperClientHealthCheckEnabled=true
bookkeeperClientRackawarePolicyEnabled=true
managedLedgerCacheEvictionWatermark=0.9
managedLedgerCursorMaxEntriesPerLedger=50000
loadBalancerEnabled=false
loadBalancerPlacementStrategy=weightedRandomSelection
replicationConnectionsPerBroker=16
globalZookeeperServers=
topicLevelPoliciesEnabled=false
subscriptionKeySharedUseConsistentHashing=false
"""


def ssl_standalone_conf(certs: dict[str, Path], port: int, tls_port: int, web: int, https: int) -> str:
    """A file in the shape of Pulsar's test standalone-ssl.conf: TLS ports beside the plain ones, the TLS, token
    and basic providers, authorization on, plus the many settings Magnetar leaves alone."""
    return f"""\
### General
zookeeperServers=
brokerServicePort={port}
brokerServicePortTls={tls_port}
webServicePort={web}
webServicePortTls={https}
bindAddress=127.0.0.1
advertisedAddress=localhost
clusterName=standalone
brokerClientAuthenticationPlugin=
zooKeeperSessionTimeoutMillis=30000
maxUnackedMessagesPerConsumer=50000

### Authentication
tlsCertificateFilePath={certs['cert']}
tlsKeyFilePath={certs['key']}
tlsTrustCertsFilePath={certs['ca']}
tlsAllowInsecureConnection=false
anonymousUserRole=anonymous
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls,\
org.apache.pulsar.broker.authentication.AuthenticationProviderToken,\
org.apache.pulsar.broker.authentication.AuthenticationProviderBasic
authorizationEnabled=true
tokenSecretKey=file://{certs['secret']}
basicAuthConf={certs['htpasswd']}
superUserRoles=localhost,superUser,admin

### Managed ledger
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
managedLedgerCacheSizeMB=1024
managedLedgerMaxEntriesPerLedger=50000
managedLedgerMinLedgerRolloverTimeMinutes=10
managedLedgerMaxLedgerRolloverTimeMinutes=240

### Topics
keepAliveIntervalSeconds=30
backlogQuotaCheckIntervalInSeconds=60
brokerDeleteInactiveTopicsEnabled=true
messageExpiryCheckIntervalInMinutes=5
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
defaultNumPartitions=1
defaultRetentionTimeInMinutes=0
defaultRetentionSizeInMB=0
loadBalancerAutoBundleSplitEnabled=false
loadBalancerNamespaceMaximumBundles=128
maxMessageSize=1024000
{UNSUPPORTED}"""


@pytest.fixture
def certs(tmp_path) -> dict[str, Path]:
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    out = {"ca": tmp_path / "cacert.pem", "cert": tmp_path / "broker-cert.pem", "key": tmp_path / "broker-key.pem",
           "secret": tmp_path / "secret.key", "htpasswd": tmp_path / ".htpasswd"}
    ca.cert_pem.write_to_path(out["ca"])
    server.cert_chain_pems[0].write_to_path(out["cert"])
    server.private_key_pem.write_to_path(out["key"])
    out["secret"].write_bytes(b"\x01" * 32)
    out["htpasswd"].write_text("admin:$apr1$1h7UqnMj$/oR6/2w0c9hE5gYFsI5b9/\n")
    return out


def test_a_file_shaped_like_pulsars_standalone_ssl_conf_gives_the_broker_config(tmp_path, certs, caplog):
    conf = tmp_path / "standalone-ssl.conf"
    conf.write_text(ssl_standalone_conf(certs, 6650, 6651, 8080, 8443))
    cfg = load_config(conf, {"metadata_store_url": "memory://ssl-conf"}, environ={})
    assert (cfg.host, cfg.advertised_address, cfg.cluster_name) == ("127.0.0.1", "localhost", "standalone")
    assert (cfg.port, cfg.tls_port, cfg.http_port, cfg.https_port) == (6650, 6651, 8080, 8443)
    assert (cfg.tls_certificate_file_path, cfg.tls_key_file_path, cfg.tls_trust_certs_file_path) == \
        (str(certs["cert"]), str(certs["key"]), str(certs["ca"]))
    assert cfg.tls_allow_insecure_connection is False and cfg.tls_require_trusted_client_cert_on_connect is False
    assert cfg.authentication_enabled and cfg.authentication_providers == ("tls", "token", "basic")
    assert cfg.token_secret_key == f"file://{certs['secret']}" and cfg.basic_auth_conf == str(certs["htpasswd"])
    assert cfg.anonymous_user_role == "anonymous"
    assert cfg.authorization_enabled and cfg.super_user_roles == ("localhost", "superUser", "admin")
    assert (cfg.managed_ledger_ensemble_size, cfg.managed_ledger_write_quorum, cfg.managed_ledger_ack_quorum) == (1, 1, 1)
    assert (cfg.managed_ledger_min_ledger_rollover_time_s, cfg.managed_ledger_max_ledger_rollover_time_s) == (600, 14_400)
    assert (cfg.managed_ledger_cache_size_mb, cfg.max_message_size, cfg.metadata_session_timeout_s) == (1024, 1_024_000, 30)
    assert cfg.load_balancer_auto_bundle_split_enabled is False and cfg.max_unacked_messages_per_consumer == 50_000
    assert cfg.metadata_store_url == "memory://ssl-conf"  # the flag beats the (empty) zookeeperServers
    warnings = [r.getMessage() for r in caplog.records if r.name == "broker.config"]
    assert len(warnings) == 1
    unsupported = sorted(line.split("=")[0] for line in UNSUPPORTED.splitlines())
    assert warnings[0].endswith(f"{len(unsupported)} Pulsar settings Magnetar does not support: {', '.join(unsupported)}")


@dataclass
class StandaloneFromFile(BrokerProcess):
    """`broker standalone --config FILE` with no port flags: the file names every port."""

    config_path: Path | None = None

    def command(self) -> list[str]:
        return [str(VENV_BIN / "broker"), "standalone", "--data-dir", str(self.data_dir),
                "--bookie-port", str(self.bookie_port), "--bookie-http-port", str(self.bookie_http_port),
                "--config", str(self.config_path)]


@pytest.fixture
def started(tmp_path):
    brokers: list[BrokerProcess] = []

    def start(broker: BrokerProcess) -> BrokerProcess:
        brokers.append(broker)
        return broker.start(timeout_s=60)

    yield start
    stop_all(brokers)


def test_standalone_serves_on_the_ports_its_properties_file_names(tmp_path, started):
    port, web = free_port(), free_port()
    conf = tmp_path / "standalone.conf"
    conf.write_text(f"bindAddress=127.0.0.1\nadvertisedAddress=127.0.0.1\nbrokerServicePort={port}\n"
                    f"webServicePort={web}\nbrokerServicePortTls=\nwebServicePortTls=\nclusterName=from-file\n"
                    f"managedLedgerDefaultEnsembleSize=3\nmanagedLedgerDefaultWriteQuorum=3\n{UNSUPPORTED}")
    # port / http_port are where the harness looks; the command passes only --config
    broker = started(StandaloneFromFile(tmp_path / "data", port=port, http_port=web, config_path=conf))

    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = "persistent://public/default/from-a-properties-file"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"served on the file's port")
        assert payloads(receive_n(consumer, 1)) == [b"served on the file's port"]
    finally:
        client.close()
    status, cluster = admin_call(broker, "GET", "/admin/v2/clusters/from-file")
    assert status == 200 and cluster["brokerServiceUrl"] == f"pulsar://127.0.0.1:{port}"
    assert cluster["serviceUrl"] == f"http://127.0.0.1:{web}"
    warned = [line for line in broker.log_path.read_text().splitlines() if "does not support" in line]
    assert len(warned) == 1 and "backlogQuotaCheckEnabled" in warned[0] and "loadBalancerEnabled" in warned[0]


def test_a_broken_properties_file_is_refused_with_its_reason(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("authenticationEnabled=true\nauthenticationProviders=com.example.AuthenticationProviderLdap\n")
    broker = StandaloneFromFile(tmp_path / "data", config_path=conf)
    proc = broker.spawn()
    assert proc.wait(60) == 2
    assert "Magnetar has no provider com.example.AuthenticationProviderLdap" in broker.log_path.read_text()


# ---- advertised listeners ------------------------------------------------------------------------------------


class Forwarder:
    """A TCP forwarder on ``listen`` to ``target`` that counts the connections it carried."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        self.accepted = 0
        self._server = socket.create_server(listen)
        self._sockets: list[socket.socket] = [self._server]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self.accepted += 1
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            for s in self._sockets:
                s.close()


@pytest.fixture
def listener_broker(tmp_path, started):
    """A standalone broker whose "internal" listener is its own address and whose "external" listener is
    127.0.0.2, where a forwarder passes connections on to it."""
    port, web, external = free_port(), free_port(), free_port()
    forwarder = Forwarder(("127.0.0.2", external), ("127.0.0.1", port))
    conf = tmp_path / "listeners.conf"
    conf.write_text(f"bindAddress=127.0.0.1\nbrokerServicePort={port}\nwebServicePort={web}\n"
                    f"advertisedListeners=internal:pulsar://127.0.0.1:{port},external:pulsar://127.0.0.2:{external}\n"
                    "internalListenerName=internal\n")
    broker = started(StandaloneFromFile(tmp_path / "data", port=port, http_port=web, config_path=conf))
    yield broker, forwarder, external
    forwarder.close()


def produce_and_consume(service_url: str, topic: str, **client_args) -> list[bytes]:
    client = pulsar.Client(service_url, operation_timeout_seconds=15,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn), **client_args)
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(topic.encode())
        return payloads(receive_n(consumer, 1))
    finally:
        client.close()


def test_the_client_connects_through_the_listener_it_names(listener_broker):
    broker, forwarder, _ = listener_broker
    topic = "persistent://public/default/via-internal"
    assert produce_and_consume(broker.service_url, topic, listener_name="internal") == [topic.encode()]
    assert forwarder.accepted == 0  # the internal listener's address is the broker's own
    topic = "persistent://public/default/via-external"
    assert produce_and_consume(broker.service_url, topic, listener_name="external") == [topic.encode()]
    assert forwarder.accepted >= 1  # the lookup sent the client to 127.0.0.2, through the forwarder
    seen = forwarder.accepted
    topic = "persistent://public/default/no-listener-named"
    assert produce_and_consume(broker.service_url, topic) == [topic.encode()]
    assert forwarder.accepted == seen  # no name: the internal listener


def test_an_unknown_listener_name_fails_the_lookup(listener_broker):
    broker, forwarder, _ = listener_broker
    assert admin_call(broker, "PUT", "/admin/v2/persistent/public/default/three/partitions", 3)[0] == 204
    client = pulsar.Client(broker.service_url, listener_name="test", operation_timeout_seconds=3,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/three")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/not-partitioned")
    finally:
        client.close()


def test_a_listener_name_on_a_broker_without_listeners_fails(standalone):
    """What the official client's own listener_name test expects of a broker with no advertisedListeners."""
    assert admin_call(standalone, "PUT", "/admin/v2/persistent/public/default/no-listeners/partitions", 3)[0] == 204
    client = pulsar.Client(standalone.service_url, listener_name="test", operation_timeout_seconds=3,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/no-listeners")
    finally:
        client.close()
    topic = "persistent://public/default/no-listeners"
    assert produce_and_consume(standalone.service_url, topic) == [topic.encode()]  # without a name it works


def http_lookup(broker, topic: str, query: str = "", headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"{broker.web_url}/lookup/v2/topic/persistent/public/default/{topic}{query}",
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_http_lookup_honours_the_listener_name(listener_broker):
    broker, _, external = listener_broker
    assert http_lookup(broker, "h")[1]["brokerUrl"] == broker.service_url
    assert http_lookup(broker, "h", "?listenerName=external")[1]["brokerUrl"] == f"pulsar://127.0.0.2:{external}"
    assert http_lookup(broker, "h", headers={"X-Pulsar-ListenerName": "external"})[1]["brokerUrl"] == \
        f"pulsar://127.0.0.2:{external}"
    status, body = http_lookup(broker, "h", "?listenerName=test")
    assert status >= 400 and "no advertised listener named 'test'" in body["reason"]


def test_any_broker_answers_with_the_owners_listener(start_bookies, tmp_path, started):
    """Two brokers on one ZooKeeper, each with an external listener on 127.0.0.2 behind its own forwarder: a client
    that asks broker A for a topic broker B owns is sent to B's external address."""
    url = start_bookies(3).metadata_url
    brokers, forwarders = [], []
    for i in range(2):
        port, web, external = free_port(), free_port(), free_port()
        forwarders.append(Forwarder(("127.0.0.2", external), ("127.0.0.1", port)))
        env = {"MAGNETAR_BROKER_ADVERTISED_LISTENERS":
               f"internal:pulsar://127.0.0.1:{port},external:pulsar://127.0.0.2:{external}"}
        brokers.append(BrokerProcess(tmp_path / f"broker-{i}", metadata_url=url, port=port, http_port=web, env=env))
    try:
        for broker in brokers:
            started(broker)
        a, b = brokers
        topic = "persistent://public/default/owned-by-b"
        assert http_lookup(b, "owned-by-b", "?authoritative=true")[1]["brokerUrl"] == b.service_url  # b takes it
        assert http_lookup(a, "owned-by-b", "?listenerName=external")[1]["brokerUrl"] == \
            f"pulsar://127.0.0.2:{forwarders[1]._server.getsockname()[1]}"
        assert produce_and_consume(a.service_url, topic, listener_name="external") == [topic.encode()]
        assert forwarders[1].accepted >= 1 and forwarders[0].accepted == 0
        # Unowned bundles: placement spreads them over both brokers; a lookup sent on (307) keeps its listener.
        externals = {f"pulsar://127.0.0.2:{f._server.getsockname()[1]}" for f in forwarders}
        answers = {http_lookup(a, name.rsplit("/", 1)[1], "?listenerName=external")[1]["brokerUrl"]
                   for name in (topics_in(bundle, 1, "spread")[0] for bundle in NamespaceBundles.equal(4).ranges())}
        assert answers == externals
    finally:
        for forwarder in forwarders:
            forwarder.close()


# ---- clusters ---------------------------------------------------------------------------------------------------


def test_clusters_admin_routes(standalone):
    status, names = admin_call(standalone, "GET", "/admin/v2/clusters")
    assert status == 200 and "standalone" in names  # the broker's own cluster exists from its start
    status, own = admin_call(standalone, "GET", "/admin/v2/clusters/standalone")
    assert status == 200 and own["brokerServiceUrl"] == standalone.service_url and own["serviceUrl"] == standalone.web_url

    data = {"serviceUrl": "http://east.example:8080", "serviceUrlTls": "https://east.example:8443",
            "brokerServiceUrl": "pulsar://east.example:6650", "brokerServiceUrlTls": "pulsar+ssl://east.example:6651"}
    assert admin_call(standalone, "PUT", "/admin/v2/clusters/east", data)[0] == 204
    assert admin_call(standalone, "PUT", "/admin/v2/clusters/east", data)[0] == 409
    assert admin_call(standalone, "GET", "/admin/v2/clusters/east") == (200, data)
    assert "east" in admin_call(standalone, "GET", "/admin/v2/clusters")[1]
    changed = {**data, "brokerServiceUrl": "pulsar://east-2.example:6650", "peerClusterNames": ["west"]}
    assert admin_call(standalone, "POST", "/admin/v2/clusters/east", changed)[0] == 204
    assert admin_call(standalone, "GET", "/admin/v2/clusters/east") == (200, changed)
    assert admin_call(standalone, "DELETE", "/admin/v2/clusters/east")[0] == 204
    assert admin_call(standalone, "GET", "/admin/v2/clusters/east")[0] == 404
    assert admin_call(standalone, "POST", "/admin/v2/clusters/east", data)[0] == 404
    assert admin_call(standalone, "DELETE", "/admin/v2/clusters/east")[0] == 404


@pytest.mark.parametrize("name, body, status, reason", [
    ("bad", {"brokerServiceUrl": "http://h:6650"}, 400, "brokerServiceUrl 'http://h:6650' is not a valid URL"),
    ("bad", {"serviceUrl": 8080}, 400, "serviceUrl must be a URL string"),
    ("bad", {"serviceUrl": "http://h:8080", "colour": "blue"}, 400, "unknown ClusterData fields: colour"),
    ("bad", [1, 2], 400, "must be a JSON object"),
    ("b@d", {"serviceUrl": "http://h:8080"}, 412, "cluster"),
])
def test_a_bad_cluster_is_refused(standalone, name, body, status, reason):
    got, answer = admin_call(standalone, "PUT", f"/admin/v2/clusters/{name}", body)
    assert got == status and reason in answer["reason"]
    assert admin_call(standalone, "GET", f"/admin/v2/clusters/{name}")[0] in (404, 412)


def test_magnetar_connects_through_the_listener_it_names(listener_broker):
    import magnetar

    broker, forwarder, _ = listener_broker
    topic = "persistent://public/default/magnetar-via-external"
    client = magnetar.Client(broker.service_url, listener_name="external", operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(topic.encode())
        assert payloads(receive_n(consumer, 1)) == [topic.encode()]
    finally:
        client.close()
    assert forwarder.accepted >= 1  # the lookup under "external" sent it to 127.0.0.2, through the forwarder
