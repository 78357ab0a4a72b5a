"""Pulsar's own configuration files (``standalone.conf``, ``broker.conf``) read into BrokerConfig fields.

How it works: ``parse_properties`` reads the Java-properties subset Pulsar's files use (``key=value`` or
``key: value``, ``#`` / ``!`` comments, blank lines, trailing-backslash continuations; values trimmed; the last
of a repeated key wins). ``broker_fields`` maps each Pulsar key Magnetar supports to its BrokerConfig field
through ``PULSAR_KEYS``, converting units (minutes and milliseconds to the ``_s`` fields), Pulsar's metadata
store forms (``zk:h1:2181,h2:2181/chroot`` and bare ``h:2181``) to ``zk://`` URLs and Pulsar's authentication
provider class names to Magnetar's provider names. An empty value means "not set" (the default applies),
except for the four ports, where Pulsar's empty value turns that listener off (None). Keys Magnetar does not
support are returned, not refused: a real Pulsar file has hundreds, and the caller lists them in one warning.
The result feeds ``storage.config.load_layered`` as the file layer, so flags and environment variables still
override it. ``file_format`` tells a properties file from TOML by extension, else by content.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

MAX_FILE_BYTES = 4 * 1024 * 1024  # Pulsar's broker.conf is ~90 KiB; anything near this is not a config file
PROPERTIES_SUFFIXES = (".conf", ".properties")
TOML_SUFFIXES = (".toml",)

PROVIDER_CLASSES = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}
PROVIDER_NAMES = frozenset(PROVIDER_CLASSES.values())


class PulsarConfigError(ValueError):
    """A Pulsar configuration file is malformed or names something Magnetar cannot do; the message says where."""


# ---- the properties format ------------------------------------------------------------------------------------


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """``key -> value`` (both trimmed) from a properties text. Raises PulsarConfigError on a line without a key."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):  # Java properties: an odd trailing backslash joins the next line
            line = line[:-1] + lines[i].strip()
            i += 1
        key, value = _split(line)
        if not key:
            raise PulsarConfigError(f"{source}:{start}: expected key=value, got {line[:80]!r}")
        out[key] = value
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """Java's rule: the key ends at the first unescaped '=', ':' or whitespace; one such separator (with the blanks
    around it) goes."""
    for index, char in enumerate(line):
        if char in "=: \t" and (index == 0 or line[index - 1] != "\\"):
            key, rest = line[:index], line[index:].lstrip(" \t")
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
            return key.replace("\\", ""), rest.strip()
    return line, ""


def file_format(path: str | Path, text: str) -> str:
    """``"properties"`` or ``"toml"``: by extension (.conf/.properties vs .toml), else by content. Content that
    parses as TOML and whose keys are snake_case is TOML; Pulsar's keys are camelCase (and its ``a=b`` lines
    with bare words are not TOML at all)."""
    suffix = Path(path).suffix.lower()
    if suffix in PROPERTIES_SUFFIXES:
        return "properties"
    if suffix in TOML_SUFFIXES:
        return "toml"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "properties"
    keys = list(doc.get("broker", doc)) if isinstance(doc.get("broker", doc), dict) else list(doc)
    return "properties" if any(k != k.lower() for k in keys) else "toml"


def read_config_text(path: str | Path) -> str:
    """The file's text, bounded. Raises OSError or PulsarConfigError."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise PulsarConfigError(f"{path} is larger than {MAX_FILE_BYTES} bytes: not a configuration file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # java.util.Properties' own encoding


# ---- values -------------------------------------------------------------------------------------------------------


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise PulsarConfigError(f"{key}: expected an integer, got {value!r}") from None


def _float(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise PulsarConfigError(f"{key}: expected a number, got {value!r}") from None


def _bool(key: str, value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise PulsarConfigError(f"{key}: expected true or false, got {value!r}")


def _text(key: str, value: str) -> str:
    return value


def _list(key: str, value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _scaled(factor: float, *, keep_negative: bool = False) -> Callable[[str, str], float | int]:
    def convert(key: str, value: str):
        number = _float(key, value)
        if keep_negative and number < 0:
            return -1  # Pulsar's "no limit"
        scaled = number * factor
        return int(scaled) if scaled == int(scaled) else scaled
    return convert


def metadata_store_url(key: str, value: str) -> str:
    """Pulsar's metadata store forms as Magnetar URLs: ``zk:h:2181,h2:2181/chroot`` and ``h:2181[,...][/chroot]``
    become ``zk://...``; URLs Magnetar already speaks (``zk://``, ``memory://``, ``file://``) pass unchanged."""
    if "://" in value:
        return value
    if value.startswith("zk:"):
        value = value[len("zk:"):]
    elif value.split(":", 1)[0] in ("memory", "rocksdb", "etcd", "oxia", "metadata-store"):
        raise PulsarConfigError(f"{key}: metadata store {value!r} is not supported (want ZooKeeper, zk:host:port)")
    hosts = value.split("/", 1)[0]
    if not hosts or any(":" not in h or not h.rsplit(":", 1)[1].isdigit() for h in hosts.split(",")):
        raise PulsarConfigError(f"{key}: expected zk:host:port[,host:port...][/chroot], got {value!r}")
    return f"zk://{value}"


def _port(key: str, value: str) -> int:
    port = _int(key, value)
    if not 0 <= port < 65536:
        raise PulsarConfigError(f"{key}: a port must be in 0..65535, got {port}")
    return port


PORT_KEYS = frozenset({"brokerServicePort", "brokerServicePortTls", "webServicePort", "webServicePortTls"})


@dataclass(frozen=True)
class Key:
    field: str
    convert: Callable[[str, str], Any]


# Pulsar key -> BrokerConfig field. docs/configuration.md is this table with meanings and defaults; tests check
# that every field named here exists and that the page lists every key.
PULSAR_KEYS: dict[str, Key] = {
    # -- service
    "clusterName": Key("cluster_name", _text),
    "metadataStoreUrl": Key("metadata_store_url", metadata_store_url),
    "zookeeperServers": Key("metadata_store_url", metadata_store_url),
    "metadataStoreSessionTimeoutMillis": Key("metadata_session_timeout_s", _scaled(0.001)),
    "zooKeeperSessionTimeoutMillis": Key("metadata_session_timeout_s", _scaled(0.001)),
    "bindAddress": Key("host", _text),
    "advertisedAddress": Key("advertised_address", _text),
    "brokerServicePort": Key("port", _port),
    "brokerServicePortTls": Key("tls_port", _port),
    "webServicePort": Key("http_port", _port),
    "webServicePortTls": Key("https_port", _port),
    "advertisedListeners": Key("advertised_listeners", _text),
    "internalListenerName": Key("internal_listener_name", _text),
    "keepAliveIntervalSeconds": Key("keep_alive_interval_s", _float),
    "retentionCheckIntervalInSeconds": Key("maintenance_interval_s", _float),
    # -- TLS
    "tlsCertificateFilePath": Key("tls_certificate_file_path", _text),
    "tlsKeyFilePath": Key("tls_key_file_path", _text),
    "tlsTrustCertsFilePath": Key("tls_trust_certs_file_path", _text),
    "brokerClientAuthenticationPlugin": Key("broker_client_authentication_plugin", _text),
    "brokerClientAuthenticationParameters": Key("broker_client_authentication_parameters", _text),
    "tlsRequireTrustedClientCertOnConnect": Key("tls_require_trusted_client_cert_on_connect", _bool),
    "tlsAllowInsecureConnection": Key("tls_allow_insecure_connection", _bool),
    # -- authentication and authorization
    "authenticationEnabled": Key("authentication_enabled", _bool),
    "authenticationProviders": Key("authentication_providers", _list),  # class names: see _providers
    "tokenSecretKey": Key("token_secret_key", _text),
    "tokenPublicKey": Key("token_public_key", _text),
    "tokenAuthClaim": Key("token_auth_claim", _text),
    "basicAuthConf": Key("basic_auth_conf", _text),
    "anonymousUserRole": Key("anonymous_user_role", _text),
    "authenticationRefreshCheckSeconds": Key("authentication_refresh_check_s", _float),
    "authenticateMetricsEndpoint": Key("authenticate_metrics_endpoint", _bool),
    "authorizationEnabled": Key("authorization_enabled", _bool),
    "superUserRoles": Key("super_user_roles", _list),
    # -- topics, producers, consumers
    "maxMessageSize": Key("max_message_size", _int),
    "allowAutoTopicCreation": Key("allow_auto_topic_creation", _bool),
    "allowAutoTopicCreationType": Key("allow_auto_topic_creation_type", _text),
    "defaultNumPartitions": Key("default_num_partitions", _int),
    "allowAutoSubscriptionCreation": Key("allow_auto_subscription_creation", _bool),
    "maxProducersPerTopic": Key("max_producers_per_topic", _int),
    "brokerMaxConnections": Key("broker_max_connections", _int),
    "maxTopicsPerNamespace": Key("max_topics_per_namespace", _int),
    "maxNumPartitionsPerPartitionedTopic": Key("max_num_partitions_per_partitioned_topic", _int),
    "brokerMaxConnectionsPerIp": Key("broker_max_connections_per_ip", _int),
    "maxMessagePublishBufferSizeInMB": Key("max_message_publish_buffer_size_mb", _int),
    "pulsarChannelWriteBufferHighWaterMark": Key("pulsar_channel_write_buffer_high_water_mark", _int),
    "pulsarChannelWriteBufferLowWaterMark": Key("pulsar_channel_write_buffer_low_water_mark", _int),
    "pulsarChannelPauseReceivingRequestsIfUnwritable": Key("pulsar_channel_pause_receiving_requests_if_unwritable",
                                                           _bool),
    "managedLedgerMaxReadsInFlightSizeInMB": Key("managed_ledger_max_reads_in_flight_size_mb", _int),
    "maxConsumersPerTopic": Key("max_consumers_per_topic", _int),
    # -- rate limits (per second; 0 = unlimited)
    "maxPublishRatePerTopicInMessages": Key("max_publish_rate_per_topic_in_messages", _int),
    "maxPublishRatePerTopicInBytes": Key("max_publish_rate_per_topic_in_bytes", _int),
    "brokerPublisherThrottlingMaxMessageRate": Key("broker_publisher_throttling_max_message_rate", _int),
    "brokerPublisherThrottlingMaxByteRate": Key("broker_publisher_throttling_max_byte_rate", _int),
    "dispatchThrottlingRatePerTopicInMsg": Key("dispatch_throttling_rate_per_topic_in_msg", _int),
    "dispatchThrottlingRatePerTopicInByte": Key("dispatch_throttling_rate_per_topic_in_byte", _int),
    "dispatchThrottlingRatePerSubscriptionInMsg": Key("dispatch_throttling_rate_per_subscription_in_msg", _int),
    "dispatchThrottlingRatePerSubscriptionInByte": Key("dispatch_throttling_rate_per_subscription_in_byte", _int),
    "dispatchThrottlingRateRelativeToPublishRate": Key("dispatch_throttling_rate_relative_to_publish_rate", _bool),
    "maxConsumersPerSubscription": Key("max_consumers_per_subscription", _int),
    "maxUnackedMessagesPerConsumer": Key("max_unacked_messages_per_consumer", _int),
    "maxUnackedMessagesPerSubscription": Key("max_unacked_messages_per_subscription", _int),
    "brokerServiceCompactionThresholdInBytes": Key("broker_service_compaction_threshold_in_bytes", _int),
    "topicCompactionRetainNullKey": Key("topic_compaction_retain_null_key", _bool),
    "dispatcherMaxReadBatchSize": Key("dispatcher_max_read_batch_size", _int),
    "dispatcherMaxReadSizeBytes": Key("dispatcher_max_read_size_bytes", _int),
    "brokerDeduplicationEnabled": Key("deduplication_enabled", _bool),
    # -- message lifecycle
    "messageExpiryCheckIntervalInMinutes": Key("message_expiry_check_interval_s", _scaled(60)),
    "backlogQuotaCheckIntervalInSeconds": Key("backlog_quota_check_interval_s", _float),
    "ttlDurationDefaultInSeconds": Key("ttl_duration_default_in_seconds", _int),
    "backlogQuotaDefaultLimitBytes": Key("backlog_quota_default_limit_bytes", _int),
    "backlogQuotaDefaultLimitSecond": Key("backlog_quota_default_limit_second", _int),
    "backlogQuotaDefaultRetentionPolicy": Key("backlog_quota_default_retention_policy", _text),
    "brokerDeleteInactiveTopicsEnabled": Key("broker_delete_inactive_topics_enabled", _bool),
    "brokerDeleteInactiveTopicsFrequencySeconds": Key("broker_delete_inactive_topics_frequency_s", _float),
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": Key("broker_delete_inactive_topics_max_inactive_duration_s", _int),
    "brokerDeleteInactiveTopicsMode": Key("broker_delete_inactive_topics_mode", _text),
    "subscriptionExpirationTimeMinutes": Key("subscription_expiration_time_minutes", _int),
    "subscriptionExpiryCheckIntervalInMinutes": Key("subscription_expiry_check_interval_s", _scaled(60)),
    "delayedDeliveryEnabled": Key("delayed_delivery_enabled", _bool),
    "schemaCompatibilityStrategy": Key("schema_compatibility_strategy", _text),
    "isAllowAutoUpdateSchemaEnabled": Key("is_allow_auto_update_schema", _bool),
    "isSchemaValidationEnforced": Key("schema_validation_enforced", _bool),
    "subscriptionKeySharedConsistentHashingReplicaPoints": Key("subscription_key_shared_consistent_hashing_points", _int),
    "keySharedLookAheadMsgInReplayThresholdPerConsumer":
        Key("key_shared_look_ahead_msg_in_replay_threshold_per_consumer", _int),
    "keySharedLookAheadMsgInReplayThresholdPerSubscription":
        Key("key_shared_look_ahead_msg_in_replay_threshold_per_subscription", _int),
    "defaultNumberOfNamespaceBundles": Key("default_number_of_namespace_bundles", _int),
    # -- managed ledger
    "journalSyncData": Key("journal_sync_data", _bool),  # standalone: its embedded bookies' journals
    "managedLedgerDefaultEnsembleSize": Key("managed_ledger_ensemble_size", _int),
    "managedLedgerDefaultWriteQuorum": Key("managed_ledger_write_quorum", _int),
    "managedLedgerDefaultAckQuorum": Key("managed_ledger_ack_quorum", _int),
    "managedLedgerMaxEntriesPerLedger": Key("managed_ledger_max_entries_per_ledger", _int),
    "managedLedgerMaxSizePerLedgerMbytes": Key("managed_ledger_max_size_per_ledger_mb", _int),
    "managedLedgerMinLedgerRolloverTimeMinutes": Key("managed_ledger_min_ledger_rollover_time_s", _scaled(60)),
    "managedLedgerMaxLedgerRolloverTimeMinutes": Key("managed_ledger_max_ledger_rollover_time_s", _scaled(60)),
    "managedLedgerCacheSizeMB": Key("managed_ledger_cache_size_mb", _int),
    "managedLedgerDefaultMarkDeleteRateLimit": Key("managed_ledger_default_mark_delete_rate_limit", _float),
    # Pulsar's one password for every ledger; Magnetar derives each ledger's password from it (docs/security.md)
    "managedLedgerPassword": Key("managed_ledger_password_secret", _text),
    # -- TLS to the bookies (docs/security.md "Storage")
    "bookkeeperTLSTrustCertsFilePath": Key("bookkeeper_tls_trust_certs_file_path", _text),
    "bookkeeperTLSClientAuthentication": Key("bookkeeper_tls_client_authentication", _bool),
    "bookkeeperTLSCertificateFilePath": Key("bookkeeper_tls_certificate_file_path", _text),
    "bookkeeperTLSKeyFilePath": Key("bookkeeper_tls_key_file_path", _text),
    "defaultRetentionTimeInMinutes": Key("default_retention_time_s", _scaled(60, keep_negative=True)),
    "defaultRetentionSizeInMB": Key("default_retention_size_mb", _int),
    # -- load balancing
    "statsUpdateFrequencyInSecs": Key("stats_update_frequency_s", _float),
    "loadBalancerReportUpdateMinIntervalMillis": Key("load_report_interval_s", _scaled(0.001)),
    "loadBalancerAutoBundleSplitEnabled": Key("load_balancer_auto_bundle_split_enabled", _bool),
    "loadBalancerAutoUnloadSplitBundlesEnabled": Key("load_balancer_auto_unload_split_bundles_enabled", _bool),
    "loadBalancerSplitIntervalMinutes": Key("load_balancer_split_interval_s", _scaled(60)),
    "loadBalancerNamespaceBundleMaxTopics": Key("load_balancer_namespace_bundle_max_topics", _int),
    "loadBalancerNamespaceBundleMaxSessions": Key("load_balancer_namespace_bundle_max_sessions", _int),
    "loadBalancerNamespaceBundleMaxMsgRate": Key("load_balancer_namespace_bundle_max_msg_rate", _float),
    "loadBalancerNamespaceBundleMaxBandwidthMbytes": Key("load_balancer_namespace_bundle_max_bandwidth_mbytes", _float),
    "loadBalancerNamespaceMaximumBundles": Key("load_balancer_namespace_maximum_bundles", _int),
    "loadBalancerSheddingEnabled": Key("load_balancer_shedding_enabled", _bool),
    "loadBalancerSheddingIntervalMinutes": Key("load_balancer_shedding_interval_s", _scaled(60)),
    "loadBalancerSheddingGracePeriodMinutes": Key("load_balancer_shedding_grace_period_s", _scaled(60)),
    "loadBalancerBrokerThresholdShedderPercentage": Key("load_balancer_broker_threshold_shedder_percentage", _float),
    "loadBalancerSheddingConditionHitCountThreshold": Key("load_balancer_shedding_condition_hit_count_threshold", _int),
}


@dataclass(frozen=True)
class PulsarSettings:
    """What a Pulsar file says, as BrokerConfig field values, plus the keys Magnetar left alone."""

    values: dict[str, Any]
    unknown: tuple[str, ...]  # Pulsar keys Magnetar does not support (listed in one warning)
    notes: tuple[str, ...] = ()  # settings read but without effect, with the reason (also warned)


def broker_fields(props: Mapping[str, str]) -> PulsarSettings:
    """Map Pulsar keys to BrokerConfig fields. Raises PulsarConfigError naming the key for a value that cannot be
    used, including an authentication provider class Magnetar does not have while authentication is enabled."""
    values: dict[str, Any] = {}
    unknown, notes = [], []
    for key, raw in props.items():
        spec = PULSAR_KEYS.get(key)
        if spec is None:
            unknown.append(key)
            continue
        if raw == "":
            if key in PORT_KEYS:
                values[spec.field] = None  # Pulsar: an empty port turns that listener off
            continue
        if key == "zookeeperServers" and props.get("metadataStoreUrl"):
            continue  # the deprecated name yields to the current one
        if key == "zooKeeperSessionTimeoutMillis" and props.get("metadataStoreSessionTimeoutMillis"):
            continue
        values[spec.field] = spec.convert(key, raw)
    if "authentication_providers" in values:
        values["authentication_providers"], note = _providers(
            values["authentication_providers"], enabled=values.get("authentication_enabled", False))
        if note:
            notes.append(note)
    return PulsarSettings(values, tuple(sorted(unknown)), tuple(notes))


def _providers(classes: tuple[str, ...], *, enabled: bool) -> tuple[tuple[str, ...], str | None]:
    """Pulsar provider class names (or Magnetar's own names) -> Magnetar's names. An unknown class is an error when
    authentication is enabled; when it is off Pulsar never loads the providers, so the class is only noted."""
    names, unknown = [], []
    for cls in classes:
        name = PROVIDER_CLASSES.get(cls) or (cls if cls in PROVIDER_NAMES else None)
        if name is None:
            unknown.append(cls)
        elif name not in names:
            names.append(name)
    if unknown and enabled:
        raise PulsarConfigError(
            f"authenticationProviders: Magnetar has no provider {', '.join(unknown)}; it supports "
            + ", ".join(sorted(PROVIDER_CLASSES)))
    note = (f"authenticationProviders {', '.join(unknown)} ignored (authenticationEnabled is false)"
            if unknown else None)
    return tuple(names), note


def load_pulsar_file(path: str | Path, text: str | None = None) -> PulsarSettings:
    """Read and map a Pulsar properties file. Raises OSError or PulsarConfigError (with the file's name)."""
    text = read_config_text(path) if text is None else text
    try:
        return broker_fields(parse_properties(text, str(path)))
    except PulsarConfigError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise PulsarConfigError(f"{path}: {exc}") from None
