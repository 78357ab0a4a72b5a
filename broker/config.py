"""Broker configuration: one frozen dataclass, loaded through storage.config.load_layered.

Defaults follow Pulsar's broker.conf where it has one (maxMessageSize 5 MiB,
maxUnackedMessagesPerConsumer 50000, maxUnackedMessagesPerSubscription
200000, dispatcherMaxReadBatchSize 100, brokerDeduplicationEnabled false,
allowAutoTopicCreation true, non-partitioned). Replication defaults to
E2/Qw2/Qa2 so every acknowledged message is on two zones.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from broker.loadbalance.auto_split import SplitThresholds
from broker.loadbalance.load_shedding import SheddingPolicy
from broker.security.tls import check_config as check_tls_config
from broker.ownership.listeners import AdvertisedListener, internal_listener, parse_listeners
from broker.pulsar_conf import PulsarConfigError, file_format, load_pulsar_file, read_config_text
from storage.config import load_layered
from storage.managed_ledger import ManagedLedgerConfig, ManagedLedgerConfigError
from storage.managed_ledger.passwords import parse_secret

log = logging.getLogger(__name__)

ENV_PREFIX = "MAGNETAR_BROKER_"
MAX_STATS_WINDOW_SAMPLES = 120  # e.g. 10 min sampled every 5 s; memory grows with samples x active topics
MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# Room in a frame for the command and metadata around a max-size payload (Pulsar's Commands.MESSAGE_SIZE_FRAME_PADDING).
FRAME_PADDING = 10 * 1024
AUTHENTICATION_PROVIDERS = ("token", "tls", "basic")  # Pulsar's auth method names
RATE_LIMIT_FIELDS = (
    "max_publish_rate_per_topic_in_messages", "max_publish_rate_per_topic_in_bytes",
    "broker_publisher_throttling_max_message_rate", "broker_publisher_throttling_max_byte_rate",
    "dispatch_throttling_rate_per_topic_in_msg", "dispatch_throttling_rate_per_topic_in_byte",
    "dispatch_throttling_rate_per_subscription_in_msg", "dispatch_throttling_rate_per_subscription_in_byte",
)


@dataclass(frozen=True)
class BrokerConfig:
    metadata_store_url: str
    host: str = "127.0.0.1"
    port: int | None = 6650  # None = the plain Pulsar port is off (Pulsar's empty brokerServicePort): TLS only
    http_port: int | None = 8080  # None = plain HTTP off (empty webServicePort)
    advertised_address: str | None = None  # host clients dial; default: host (or 127.0.0.1 when host is 0.0.0.0)
    cluster_name: str = "standalone"
    stream_port: int | None = 4181  # the Stream API (gRPC, broker/streams/); None = off

    max_message_size: int = MAX_MESSAGE_SIZE
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: str = "non-partitioned"  # or "partitioned"
    default_num_partitions: int = 1
    allow_auto_subscription_creation: bool = True

    max_producers_per_topic: int = 0  # 0 = unlimited; namespace policies override
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    dispatcher_max_read_batch_size: int = 100
    # Topic compaction (broker/compaction): bytes stored after a topic's compaction horizon that start a run
    # (0 = off; the namespace's compaction_threshold overrides), and whether keyless messages survive a run.
    broker_service_compaction_threshold_in_bytes: int = 0
    topic_compaction_retain_null_key: bool = False
    dispatcher_max_read_size_bytes: int = 5 * 1024 * 1024  # Pulsar's dispatcherMaxReadSizeBytes
    # Ours (Pulsar has no broker-side bound): the most messages one published batch may declare. It also bounds
    # the batch size an ACK may claim for an entry the broker did not track, so neither can be a memory bomb.
    max_num_messages_in_batch: int = 100_000
    # Bounds on what clients hold (broker/server/limits.py); 0 = unlimited, as in Pulsar.
    broker_max_connections: int = 0
    max_topics_per_namespace: int = 0  # partitions count as topics
    max_num_partitions_per_partitioned_topic: int = 0
    broker_max_connections_per_ip: int = 0
    max_message_publish_buffer_size_mb: int = 512  # Pulsar's default is half the JVM's direct memory
    # Ours: adds of 256 KiB and up go to each bookie at most this fast while small adds are flowing too, so a
    # producer of very large messages does not stall everyone else's small ones (storage/client/pacing.py).
    # 0 = never paced.
    bookkeeper_client_bulk_add_pace_mb_per_s: int = 64
    # Set by the supervisor of several workers (broker/workers.py) on each of them: the file through which they
    # tell one another when they last sent a small add, so each paces its large adds for all of them (they share
    # the bookies and the cores). Not a Pulsar key; None for a broker on its own.
    small_add_beacon_path: str | None = None
    # Bytes dispatchers have read from storage and not yet handed to consumers' connections, broker-wide
    # (broker/subscriptions/reads_in_flight.py). Pulsar's default is 0 (off); ours bounds it.
    managed_ledger_max_reads_in_flight_size_mb: int = 256
    # Rate limits (broker/topics/throttling.py): the defaults for topics whose namespace sets no publish-rate or
    # dispatch-rate policy, per second; 0 or -1 = unlimited, as in Pulsar. The broker-wide publish rate counts
    # every topic's SENDs together.
    max_publish_rate_per_topic_in_messages: int = 0
    max_publish_rate_per_topic_in_bytes: int = 0
    broker_publisher_throttling_max_message_rate: int = 0
    broker_publisher_throttling_max_byte_rate: int = 0
    dispatch_throttling_rate_per_topic_in_msg: int = 0
    dispatch_throttling_rate_per_topic_in_byte: int = 0
    dispatch_throttling_rate_per_subscription_in_msg: int = 0
    dispatch_throttling_rate_per_subscription_in_byte: int = 0
    dispatch_throttling_rate_relative_to_publish_rate: bool = False
    connection_timeout_s: float = 10.0  # ours: a connection must complete CONNECT (and authentication) within this
    # Pulsar's pulsarChannelWriteBuffer{High,Low}WaterMark and pulsarChannelPauseReceivingRequestsIfUnwritable:
    # over the high mark of unsent reply bytes, a connection's requests are not read until the buffer is under the
    # low mark, so a client that never reads its replies cannot grow the broker. Pulsar leaves the pause off by
    # default; here it is on (invariant 9).
    pulsar_channel_write_buffer_high_water_mark: int = 64 * 1024
    pulsar_channel_write_buffer_low_water_mark: int = 32 * 1024
    pulsar_channel_pause_receiving_requests_if_unwritable: bool = True
    # Ours: per connection, control commands (PRODUCER, SUBSCRIBE, LOOKUP, ...), wasted work (refused commands,
    # acks of positions that name no entry) and acked ids naming entries the consumer was not sent, a second,
    # beyond a burst; over it the connection waits (broker/server/command_budget.py). 0 = unlimited. The control
    # burst is its own: a producer per partition of a 500-partition topic (a LOOKUP and a PRODUCER each) at once.
    max_control_commands_per_connection_per_s: float = 200.0
    max_control_commands_burst_per_connection: float = 1000.0
    max_wasted_commands_per_connection_per_s: float = 1000.0
    max_undispatched_acks_per_connection_per_s: float = 10_000.0
    deduplication_enabled: bool = False
    # Message lifecycle (broker/topics/lifecycle.py; docs/broker.md "Namespace policies and rate limits"). Pulsar's
    # names and defaults, with seconds for its minutes: messageExpiryCheckIntervalInMinutes 5,
    # backlogQuotaCheckIntervalInSeconds 60, ttlDurationDefaultInSeconds 0 (no TTL), backlogQuotaDefaultLimit*
    # -1 (no quota), backlogQuotaDefaultRetentionPolicy producer_request_hold.
    message_expiry_check_interval_s: float = 300.0
    backlog_quota_check_interval_s: float = 60.0
    ttl_duration_default_in_seconds: int = 0
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_second: int = -1
    backlog_quota_default_retention_policy: str = "producer_request_hold"
    # Pulsar deletes inactive topics by default (brokerDeleteInactiveTopicsEnabled=true); ours is off by default
    # so no topic disappears under an operator who did not ask for it. Namespace and topic policies turn it on.
    broker_delete_inactive_topics_enabled: bool = False
    broker_delete_inactive_topics_frequency_s: float = 60.0
    broker_delete_inactive_topics_max_inactive_duration_s: int = 60
    broker_delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    # 0 = never. Minutes, as Pulsar's key; a fraction is allowed here (not in Pulsar's properties file, nor in a
    # namespace policy) so a test can expire a subscription in seconds with the real check.
    subscription_expiration_time_minutes: float = 0
    subscription_expiry_check_interval_s: float = 300.0  # subscriptionExpiryCheckIntervalInMinutes 5
    delayed_delivery_enabled: bool = True
    # Schema registry defaults (broker/schemas); namespace policies override each.
    schema_compatibility_strategy: str = "BACKWARD"
    is_allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False  # refuse schema-less producers on a topic that has a schema
    subscription_key_shared_consistent_hashing_points: int = 100
    # Pulsar's keySharedLookAheadMsgInReplayThreshold*: how many entries a Key_Shared subscription may hold for
    # busy consumers while it reads on for the others (per consumer, and a cap for the subscription).
    key_shared_look_ahead_msg_in_replay_threshold_per_consumer: int = 2000
    key_shared_look_ahead_msg_in_replay_threshold_per_subscription: int = 20_000

    # `broker standalone` only: its embedded bookies' journalSyncData (Pulsar's standalone reads its bookie keys
    # from standalone.conf too). False acknowledges adds once the journal is written to the OS, before fdatasync:
    # a power loss or kernel crash may lose acknowledged messages. A bookie of its own reads the bookie key.
    journal_sync_data: bool = True

    managed_ledger_ensemble_size: int = 2
    managed_ledger_write_quorum: int = 2
    managed_ledger_ack_quorum: int = 2
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_max_size_per_ledger_mb: int = 2048
    managed_ledger_min_ledger_rollover_time_s: int = 600
    managed_ledger_max_ledger_rollover_time_s: int = 14_400
    managed_ledger_cache_size_mb: int = 64
    # Writes of a subscription's acknowledgements per second (storage/managed_ledger/mark_delete_rate.py); 0 = every
    # ack written at once. A namespace's or topic's persistence policy (managedLedgerMaxMarkDeleteRate) overrides it.
    managed_ledger_default_mark_delete_rate_limit: float = 1.0
    default_retention_time_s: int = 0
    default_retention_size_mb: int = 0

    default_number_of_namespace_bundles: int = 4  # Pulsar's defaultNumberOfNamespaceBundles
    keep_alive_interval_s: float = 30.0
    maintenance_interval_s: float = 60.0  # retention by time, rollover of idle ledgers (Pulsar: retentionCheckIntervalInSeconds 120)
    load_report_interval_s: float = 5.0  # Pulsar: loadBalancerReportUpdateMinIntervalMillis 5000; also on every bundle change
    # /metrics rates and "last minute" figures cover this window (Pulsar: statsUpdateFrequencyInSecs 60), sampled
    # every stats_sample_interval_s (ours), so a rate follows a change within one sample and no scrape moves it.
    stats_update_frequency_s: float = 60.0
    stats_sample_interval_s: float = 5.0
    # Set by the supervisor of several workers (broker/workers.py) on worker 0 only: the other workers' web URLs,
    # whose /metrics worker 0 merges into its own, so the host's one advertised /metrics covers every worker
    # (broker/http/workers_metrics.py). Not a Pulsar key; empty for a broker on its own.
    metrics_worker_urls: tuple[str, ...] = ()
    metadata_session_timeout_s: float = 30.0

    # Automatic load management (docs/broker.md "Automatic load management"); names and defaults are Pulsar's.
    load_balancer_auto_bundle_split_enabled: bool = True
    load_balancer_auto_unload_split_bundles_enabled: bool = True
    load_balancer_split_interval_s: float = 60.0  # loadBalancerSplitIntervalMinutes 1
    load_balancer_namespace_bundle_max_topics: int = 1000  # 0 = criterion off, for all four
    load_balancer_namespace_bundle_max_sessions: int = 1000
    load_balancer_namespace_bundle_max_msg_rate: float = 30_000.0
    load_balancer_namespace_bundle_max_bandwidth_mbytes: float = 100.0
    load_balancer_namespace_maximum_bundles: int = 128
    load_balancer_shedding_enabled: bool = True
    load_balancer_shedding_interval_s: float = 60.0  # loadBalancerSheddingIntervalMinutes 1
    load_balancer_shedding_grace_period_s: float = 1800.0  # loadBalancerSheddingGracePeriodMinutes 30
    load_balancer_broker_threshold_shedder_percentage: float = 10.0
    load_balancer_shedding_condition_hit_count_threshold: int = 3
    load_balancer_bundle_unload_min_msg_rate: float = 1000.0  # ours: Pulsar's minimum is 10 MB/s of throughput
    load_balancer_broker_max_msg_rate: float = 100_000.0  # ours: the msg/s in + out that count as 100 % load

    # Security (docs/security.md). All off by default: standalone stays open on loopback, as Pulsar standalone is.
    tls_port: int | None = None  # Pulsar's brokerServicePortTls: pulsar+ssl:// next to (or instead of) port
    https_port: int | None = None  # webServicePortTls
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_trust_certs_file_path: str | None = None  # CA that client certificates must chain to
    # How this broker proves who it is to other brokers' admin REST (Pulsar's brokerClientAuthentication*): a
    # client plugin class name and its parameters, as in client.conf. Used to list the non-persistent topics other
    # brokers serve; that role should be a superuser. None: no credentials (authentication off).
    broker_client_authentication_plugin: str | None = None
    broker_client_authentication_parameters: str | None = dataclasses.field(default=None, repr=False)
    tls_require_trusted_client_cert_on_connect: bool = False
    tls_allow_insecure_connection: bool = False
    authentication_enabled: bool = False
    authentication_providers: tuple[str, ...] = ()  # "token", "tls", "basic"; Pulsar's class names map to these
    token_secret_key: str | None = None  # file:///path or data:;base64,... (HS256)
    token_public_key: str | None = None  # file:///path or data:;base64,... (RS256, ES256)
    token_auth_claim: str = "sub"  # Pulsar's tokenAuthClaim: the claim that names the role
    basic_auth_conf: str | None = None  # htpasswd file (path, file:// or data:)
    anonymous_user_role: str | None = None  # the role of a client that presents no credentials; None = refused
    # Pulsar's authenticationRefreshCheckSeconds: how often a connection's credentials are checked for expiry
    # (an expired token is challenged with AUTH_CHALLENGE; an unanswered challenge closes the connection).
    authentication_refresh_check_s: float = 60.0
    authenticate_metrics_endpoint: bool = False  # Pulsar's authenticateMetricsEndpoint: /metrics needs credentials
    authorization_enabled: bool = False
    super_user_roles: tuple[str, ...] = ()
    advertised_listeners: str | None = None  # "internal:pulsar://h:6650,internal:pulsar+ssl://h:6651,external:..."
    internal_listener_name: str | None = None
    # Every ledger's password is derived from this (storage/managed_ledger/passwords.py): the text itself or
    # file:///path. None: a secret generated once and kept in the metadata store, shared by the cluster's brokers.
    managed_ledger_password_secret: str | None = dataclasses.field(default=None, repr=False)
    # Secrets ledgers were created under before (rotation): they still open. The generated one counts by itself.
    managed_ledger_password_previous_secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    # TLS to the bookies (storage/tls.py), Pulsar's bookkeeperTLS* keys: the trust file turns it on; client
    # authentication presents the certificate and key to bookies that require one.
    bookkeeper_tls_trust_certs_file_path: str | None = None
    bookkeeper_tls_client_authentication: bool = False
    bookkeeper_tls_certificate_file_path: str | None = None
    bookkeeper_tls_key_file_path: str | None = None

    def __post_init__(self) -> None:
        if self.advertised_address is None:
            object.__setattr__(self, "advertised_address", "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host)

    @property
    def service_url(self) -> str | None:
        return None if self.port is None else f"pulsar://{self.advertised_address}:{self.port}"

    @property
    def web_service_url(self) -> str | None:
        return None if self.http_port is None else f"http://{self.advertised_address}:{self.http_port}"

    @property
    def service_url_tls(self) -> str | None:
        return None if self.tls_port is None else f"pulsar+ssl://{self.advertised_address}:{self.tls_port}"

    @property
    def web_service_url_tls(self) -> str | None:
        return None if self.https_port is None else f"https://{self.advertised_address}:{self.https_port}"

    @property
    def broker_id(self) -> str:
        return f"{self.advertised_address}:{self.port if self.port is not None else self.tls_port}"

    @property
    def listeners(self) -> tuple[AdvertisedListener, ...]:
        """The parsed ``advertised_listeners`` (broker/ownership/listeners.py); () when unset."""
        return parse_listeners(self.advertised_listeners, plain_port=self.port is not None,
                               tls_port=self.tls_port is not None)

    @property
    def internal_listener(self) -> AdvertisedListener | None:
        """The listener named by ``internal_listener_name``, else the first; None without listeners."""
        return internal_listener(self.listeners, self.internal_listener_name)

    @property
    def max_frame_bytes(self) -> int:
        return self.max_message_size + FRAME_PADDING

    def managed_ledger_config(self, retention_time_s: int | None = None, retention_size_mb: int | None = None) -> ManagedLedgerConfig:
        return ManagedLedgerConfig(
            ensemble_size=self.managed_ledger_ensemble_size,
            write_quorum_size=self.managed_ledger_write_quorum,
            ack_quorum_size=self.managed_ledger_ack_quorum,
            max_entries_per_ledger=self.managed_ledger_max_entries_per_ledger,
            max_size_per_ledger_mb=self.managed_ledger_max_size_per_ledger_mb,
            min_ledger_rollover_time_s=self.managed_ledger_min_ledger_rollover_time_s,
            max_ledger_rollover_time_s=self.managed_ledger_max_ledger_rollover_time_s,
            retention_time_s=self.default_retention_time_s if retention_time_s is None else retention_time_s,
            retention_size_mb=self.default_retention_size_mb if retention_size_mb is None else retention_size_mb,
            cache_size_mb=self.managed_ledger_cache_size_mb,
            mark_delete_rate_per_s=self.managed_ledger_default_mark_delete_rate_limit,
        ).validate()

    def ledger_client_fields(self) -> dict:
        """The broker's ledger client settings (storage.client.config.ClientConfig fields): the entry size bound,
        the large adds' pace, and TLS from the bookkeeperTLS* settings."""
        fields = {"max_entry_bytes": self.max_frame_bytes,
                  "bulk_add_pace_bytes_per_s": self.bookkeeper_client_bulk_add_pace_mb_per_s * 1024 * 1024,
                  "small_add_beacon_path": self.small_add_beacon_path}
        if not self.bookkeeper_tls_trust_certs_file_path:
            return fields
        fields["tls_trust_certs_file_path"] = self.bookkeeper_tls_trust_certs_file_path
        if self.bookkeeper_tls_client_authentication:
            fields.update(tls_certificate_file_path=self.bookkeeper_tls_certificate_file_path,
                          tls_key_file_path=self.bookkeeper_tls_key_file_path)
        return fields

    def split_thresholds(self) -> SplitThresholds:
        return SplitThresholds(
            max_topics=self.load_balancer_namespace_bundle_max_topics,
            max_sessions=self.load_balancer_namespace_bundle_max_sessions,
            max_msg_rate=self.load_balancer_namespace_bundle_max_msg_rate,
            max_bandwidth_mbytes=self.load_balancer_namespace_bundle_max_bandwidth_mbytes,
            max_bundles=self.load_balancer_namespace_maximum_bundles,
        )

    def shedding_policy(self) -> SheddingPolicy:
        return SheddingPolicy(
            threshold_percent=self.load_balancer_broker_threshold_shedder_percentage,
            hit_count_threshold=self.load_balancer_shedding_condition_hit_count_threshold,
            grace_period_s=self.load_balancer_shedding_grace_period_s,
            min_unload_msg_rate=self.load_balancer_bundle_unload_min_msg_rate,
            broker_max_msg_rate=self.load_balancer_broker_max_msg_rate,
        )

    def validate(self) -> "BrokerConfig":
        """Cross-field checks. Returns self; raises ValueError naming the field."""
        for name in ("port", "http_port", "tls_port", "https_port", "stream_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 65536:
                raise ValueError(f"{name} must be in 0..65535, got {value}")
        if self.port is None and self.tls_port is None:
            raise ValueError("port and tls_port are both off: the broker would serve no Pulsar port")
        if self.http_port is None and self.https_port is None:
            raise ValueError("http_port and https_port are both off: the broker would serve no HTTP port")
        internal_listener(self.listeners, self.internal_listener_name)  # parses and checks both listener fields
        check_tls_config(self)
        if not 1024 <= self.max_message_size <= 100 * 1024 * 1024:
            raise ValueError(f"max_message_size must be in 1 KiB..100 MiB, got {self.max_message_size}")
        from broker.schemas.compatibility import parse_strategy

        try:
            strategy = parse_strategy(self.schema_compatibility_strategy)
        except Exception as exc:  # the registry's InvalidSchemaError: a config error here
            raise ValueError(f"schema_compatibility_strategy: {exc}") from None
        if strategy is None:
            raise ValueError("schema_compatibility_strategy must name a strategy, not UNDEFINED")
        if self.allow_auto_topic_creation_type not in ("non-partitioned", "partitioned"):
            raise ValueError("allow_auto_topic_creation_type must be 'non-partitioned' or 'partitioned'")
        if self.default_num_partitions < 1:
            raise ValueError("default_num_partitions must be >= 1")
        if self.default_number_of_namespace_bundles < 1:
            raise ValueError("default_number_of_namespace_bundles must be >= 1")
        for name in ("load_report_interval_s", "metadata_session_timeout_s", "load_balancer_split_interval_s",
                     "load_balancer_shedding_interval_s", "load_balancer_broker_max_msg_rate",
                     "stats_update_frequency_s", "stats_sample_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.stats_sample_interval_s > self.stats_update_frequency_s:
            raise ValueError("stats_sample_interval_s must be <= stats_update_frequency_s (the window it samples)")
        if self.stats_update_frequency_s / self.stats_sample_interval_s > MAX_STATS_WINDOW_SAMPLES:
            raise ValueError(f"stats_update_frequency_s / stats_sample_interval_s must be <= {MAX_STATS_WINDOW_SAMPLES} "
                             "(the stats window keeps one sample of every topic per interval)")
        for name in ("load_balancer_namespace_bundle_max_topics", "load_balancer_namespace_bundle_max_sessions",
                     "load_balancer_namespace_bundle_max_msg_rate", "load_balancer_namespace_bundle_max_bandwidth_mbytes",
                     "load_balancer_shedding_grace_period_s", "load_balancer_broker_threshold_shedder_percentage",
                     "load_balancer_bundle_unload_min_msg_rate"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.load_balancer_namespace_maximum_bundles < self.default_number_of_namespace_bundles:
            raise ValueError("load_balancer_namespace_maximum_bundles must be >= default_number_of_namespace_bundles")
        if self.load_balancer_shedding_condition_hit_count_threshold < 1:
            raise ValueError("load_balancer_shedding_condition_hit_count_threshold must be >= 1")
        for name in ("broker_max_connections", "broker_max_connections_per_ip", "max_message_publish_buffer_size_mb",
                     "max_topics_per_namespace", "max_num_partitions_per_partitioned_topic",
                     "managed_ledger_max_reads_in_flight_size_mb", "bookkeeper_client_bulk_add_pace_mb_per_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited)")
        for name in ("max_control_commands_per_connection_per_s", "max_wasted_commands_per_connection_per_s",
                     "max_undispatched_acks_per_connection_per_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited)")
        if self.max_control_commands_burst_per_connection < 1:
            raise ValueError("max_control_commands_burst_per_connection must be >= 1")
        for name in RATE_LIMIT_FIELDS:
            if getattr(self, name) < -1:
                raise ValueError(f"{name} must be >= -1 (0 or -1 = unlimited)")
        if self.connection_timeout_s <= 0:
            raise ValueError("connection_timeout_s must be > 0")
        if not 0 <= self.pulsar_channel_write_buffer_low_water_mark <= self.pulsar_channel_write_buffer_high_water_mark \
                or self.pulsar_channel_write_buffer_high_water_mark < 1:
            raise ValueError("need 0 <= pulsar_channel_write_buffer_low_water_mark <= "
                             "pulsar_channel_write_buffer_high_water_mark, and the high mark >= 1")
        if not 1 <= self.max_num_messages_in_batch <= 1 << 20:
            raise ValueError("max_num_messages_in_batch must be in 1..1048576")
        if self.dispatcher_max_read_size_bytes < 1:
            raise ValueError("dispatcher_max_read_size_bytes must be >= 1")
        if self.dispatcher_max_read_batch_size < 1:
            raise ValueError("dispatcher_max_read_batch_size must be >= 1")
        for name in ("key_shared_look_ahead_msg_in_replay_threshold_per_consumer",
                     "key_shared_look_ahead_msg_in_replay_threshold_per_subscription"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("message_expiry_check_interval_s", "backlog_quota_check_interval_s",
                     "broker_delete_inactive_topics_frequency_s", "subscription_expiry_check_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.backlog_quota_default_retention_policy not in ("producer_request_hold", "producer_exception",
                                                               "consumer_backlog_eviction"):
            raise ValueError("backlog_quota_default_retention_policy must be producer_request_hold, "
                             "producer_exception or consumer_backlog_eviction")
        if self.broker_delete_inactive_topics_mode not in ("delete_when_no_subscriptions",
                                                           "delete_when_subscriptions_caught_up"):
            raise ValueError("broker_delete_inactive_topics_mode must be delete_when_no_subscriptions or "
                             "delete_when_subscriptions_caught_up")
        for name in ("ttl_duration_default_in_seconds", "subscription_expiration_time_minutes",
                     "broker_delete_inactive_topics_max_inactive_duration_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("backlog_quota_default_limit_bytes", "backlog_quota_default_limit_second"):
            if getattr(self, name) < -1:
                raise ValueError(f"{name} must be >= -1 (-1 = no limit)")
        for name in ("max_producers_per_topic", "max_consumers_per_topic", "max_consumers_per_subscription",
                     "max_unacked_messages_per_consumer", "max_unacked_messages_per_subscription",
                     "broker_service_compaction_threshold_in_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited)")
        self._validate_authentication()
        if self.bookkeeper_tls_client_authentication and not (
                self.bookkeeper_tls_trust_certs_file_path and self.bookkeeper_tls_certificate_file_path
                and self.bookkeeper_tls_key_file_path):
            raise ValueError("bookkeeper_tls_client_authentication needs bookkeeper_tls_trust_certs_file_path, "
                             "bookkeeper_tls_certificate_file_path and bookkeeper_tls_key_file_path")
        if self.broker_client_authentication_plugin:
            from broker.admin_cli.settings import AdminCliError, authentication  # one parser of Pulsar's plugins
            try:
                authentication(self.broker_client_authentication_plugin, self.broker_client_authentication_parameters)
            except AdminCliError as exc:
                raise ValueError(f"broker_client_authentication_*: {exc}") from exc
        for secret in (self.managed_ledger_password_secret, *self.managed_ledger_password_previous_secrets):
            if secret is not None:
                parse_secret(secret)  # empty, or an unreadable file
        try:
            self.managed_ledger_config()  # its own checks (quorums, rollover, retention)
        except ManagedLedgerConfigError as exc:
            raise ValueError(str(exc)) from exc
        return self

    def _validate_authentication(self) -> None:
        if self.authentication_refresh_check_s <= 0:
            raise ValueError("authentication_refresh_check_s must be > 0")
        unknown = [p for p in self.authentication_providers if p not in AUTHENTICATION_PROVIDERS]
        if unknown:
            raise ValueError(f"authentication_providers: unknown provider(s) {unknown}; "
                             f"known: {', '.join(AUTHENTICATION_PROVIDERS)}")
        if not self.authentication_enabled:
            return
        if not self.authentication_providers:
            raise ValueError("authentication_enabled needs at least one of authentication_providers")
        if "token" in self.authentication_providers and not (self.token_secret_key or self.token_public_key):
            raise ValueError("the token provider needs token_secret_key or token_public_key")
        if "basic" in self.authentication_providers and not self.basic_auth_conf:
            raise ValueError("the basic provider needs basic_auth_conf (an htpasswd file)")


def load_config(
    config_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Defaults < config file < MAGNETAR_BROKER_* env < overrides. The file is TOML (field names, ``[broker]``
    table or top level) or a Pulsar properties file (Pulsar's key names, broker/pulsar_conf.py), told apart by
    extension or content. Pulsar keys Magnetar does not support are listed in one warning, not refused.
    Raises ValueError (PulsarConfigError for a properties file) or OSError."""
    if config_path is None:
        return load_layered(BrokerConfig, section="broker", env_prefix=ENV_PREFIX, overrides=overrides,
                            environ=environ, required=("metadata_store_url",))
    text = read_config_text(config_path)
    if file_format(config_path, text) == "toml":
        return load_layered(BrokerConfig, section="broker", env_prefix=ENV_PREFIX, toml_path=config_path,
                            overrides=overrides, environ=environ, required=("metadata_store_url",))
    settings = load_pulsar_file(config_path, text)
    ignored = [*settings.notes]
    if settings.unknown:
        ignored.insert(0, f"{len(settings.unknown)} Pulsar settings Magnetar does not support: {', '.join(settings.unknown)}")
    if ignored:
        log.warning("%s: ignored %s", config_path, "; ".join(ignored))
    try:
        return load_layered(BrokerConfig, section="broker", env_prefix=ENV_PREFIX, document=settings.values,
                            overrides=overrides, environ=environ, required=("metadata_store_url",))
    except PulsarConfigError:
        raise
    except ValueError as exc:
        raise PulsarConfigError(f"{config_path}: {exc}") from exc


def with_changes(config: BrokerConfig, **changes: Any) -> BrokerConfig:
    return dataclasses.replace(config, **changes).validate()
