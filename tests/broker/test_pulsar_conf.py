"""Pulsar properties files as broker configuration: the parser, the key table and the layering, from tables."""

from __future__ import annotations

import dataclasses
import logging
import typing
from pathlib import Path

import pytest

from broker.config import BrokerConfig, load_config
from broker.pulsar_conf import (
    PORT_KEYS, PULSAR_KEYS, PulsarConfigError, broker_fields, file_format, metadata_store_url, parse_properties,
)


def test_the_properties_subset_pulsar_files_use():
    text = (
        "# a comment\n! another comment\n\n"
        "clusterName=standalone\n"
        "  advertisedAddress =  broker-1.example  \n"
        "superUserRoles: admin, ops\n"
        "metadataStoreUrl=zk:h1:2181,h2:2181/pulsar\n"
        "tokenSecretKey=\n"
        "maxMessageSize=1024\\\n"
        "   000\n"
        "clusterName=again\n"
    )
    assert parse_properties(text) == {
        "clusterName": "again",  # the last of a repeated key wins, as in java.util.Properties
        "advertisedAddress": "broker-1.example",
        "superUserRoles": "admin, ops",
        "metadataStoreUrl": "zk:h1:2181,h2:2181/pulsar",
        "tokenSecretKey": "",
        "maxMessageSize": "1024000",
    }


def test_a_line_without_a_key_names_its_place():
    with pytest.raises(PulsarConfigError, match=r"broker.conf:2: expected key=value"):
        parse_properties("a=1\n=oops\n", "broker.conf")


@pytest.mark.parametrize("value, url", [
    ("zk:127.0.0.1:2181", "zk://127.0.0.1:2181"),
    ("zk:h1:2181,h2:2181,h3:2181/chroot", "zk://h1:2181,h2:2181,h3:2181/chroot"),
    ("127.0.0.1:2181", "zk://127.0.0.1:2181"),
    ("h1:2181,h2:2181", "zk://h1:2181,h2:2181"),
    ("zk://h:2181/x", "zk://h:2181/x"),
    ("memory://unit", "memory://unit"),
])
def test_metadata_store_forms(value, url):
    assert metadata_store_url("metadataStoreUrl", value) == url


@pytest.mark.parametrize("value, message", [
    ("rocksdb:/data/metadata", "not supported"),
    ("zk:no-port", "expected zk:host:port"),
    ("h1:2181,h2", "expected zk:host:port"),
])
def test_metadata_store_forms_refused(value, message):
    with pytest.raises(PulsarConfigError, match=message):
        metadata_store_url("metadataStoreUrl", value)


@pytest.mark.parametrize("props, fields", [
    ({"brokerServicePort": "7650", "webServicePort": "7080"}, {"port": 7650, "http_port": 7080}),
    ({"brokerServicePort": "", "brokerServicePortTls": "6651"}, {"port": None, "tls_port": 6651}),  # TLS only
    ({"webServicePort": "", "webServicePortTls": "8443"}, {"http_port": None, "https_port": 8443}),
    ({"managedLedgerMinLedgerRolloverTimeMinutes": "10"}, {"managed_ledger_min_ledger_rollover_time_s": 600}),
    ({"defaultRetentionTimeInMinutes": "-1"}, {"default_retention_time_s": -1}),
    ({"defaultRetentionTimeInMinutes": "2"}, {"default_retention_time_s": 120}),
    ({"metadataStoreSessionTimeoutMillis": "2500"}, {"metadata_session_timeout_s": 2.5}),
    ({"statsUpdateFrequencyInSecs": "30"}, {"stats_update_frequency_s": 30.0}),
    ({"zooKeeperSessionTimeoutMillis": "30000", "metadataStoreSessionTimeoutMillis": "5000"},
     {"metadata_session_timeout_s": 5}),
    ({"zookeeperServers": "zk1:2181", "metadataStoreUrl": "zk:zk2:2181"}, {"metadata_store_url": "zk://zk2:2181"}),
    ({"zookeeperServers": "zk1:2181", "metadataStoreUrl": ""}, {"metadata_store_url": "zk://zk1:2181"}),
    ({"superUserRoles": "admin, ops,,"}, {"super_user_roles": ("admin", "ops")}),
    ({"brokerDeduplicationEnabled": "TRUE"}, {"deduplication_enabled": True}),
    ({"managedLedgerDefaultMarkDeleteRateLimit": "0.5"}, {"managed_ledger_default_mark_delete_rate_limit": 0.5}),
    ({"brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
      "brokerClientAuthenticationParameters": "token:abc"},
     {"broker_client_authentication_plugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
      "broker_client_authentication_parameters": "token:abc"}),
    ({"tokenSecretKey": ""}, {}),  # empty = unset: the default applies
    ({"authenticationEnabled": "true", "authenticationProviders":
      "org.apache.pulsar.broker.authentication.AuthenticationProviderTls, "
      "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
      "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"},
     {"authentication_enabled": True, "authentication_providers": ("tls", "token", "basic")}),
])
def test_pulsar_keys_become_broker_fields(props, fields):
    assert broker_fields(props).values == fields


@pytest.mark.parametrize("props, message", [
    ({"brokerServicePort": "sixty"}, "brokerServicePort: expected an integer"),
    ({"brokerServicePort": "70000"}, "brokerServicePort: a port must be in"),
    ({"authorizationEnabled": "yes please"}, "authorizationEnabled: expected true or false"),
    ({"authenticationEnabled": "true", "authenticationProviders": "com.example.AuthenticationProviderLdap"},
     "Magnetar has no provider com.example.AuthenticationProviderLdap"),
])
def test_values_that_cannot_be_used_are_refused_by_pulsar_name(props, message):
    with pytest.raises(PulsarConfigError, match=message):
        broker_fields(props)


def test_unknown_keys_and_unused_providers_are_reported_not_refused():
    # Pulsar's own test standalone.conf says authenticationProviders=false with authentication off.
    settings = broker_fields({"backlogQuotaCheckEnabled": "true", "authenticationEnabled": "false",
                              "authenticationProviders": "false", "bookkeeperClientTimeoutInSeconds": "30"})
    assert settings.unknown == ("backlogQuotaCheckEnabled", "bookkeeperClientTimeoutInSeconds")
    assert settings.values == {"authentication_enabled": False, "authentication_providers": ()}
    assert settings.notes == ("authenticationProviders false ignored (authenticationEnabled is false)",)


def test_every_mapped_field_exists_with_a_matching_type():
    hints = typing.get_type_hints(BrokerConfig)
    for key, spec in PULSAR_KEYS.items():
        assert spec.field in hints, key
    assert {PULSAR_KEYS[k].field for k in PORT_KEYS} == {"port", "tls_port", "http_port", "https_port"}
    for key in PORT_KEYS:
        assert type(None) in typing.get_args(hints[PULSAR_KEYS[key].field]), key


def test_every_broker_field_with_a_pulsar_name_has_it():
    # The fields Magnetar alone has (no Pulsar key) are named here on purpose; a new field must pick a side.
    ours = {"load_balancer_bundle_unload_min_msg_rate", "load_balancer_broker_max_msg_rate", "max_num_messages_in_batch",
            "connection_timeout_s", "managed_ledger_password_previous_secrets",
            "max_control_commands_per_connection_per_s", "max_wasted_commands_per_connection_per_s",
            "max_control_commands_burst_per_connection", "max_undispatched_acks_per_connection_per_s",
            "stream_port", "stats_sample_interval_s", "metrics_worker_urls", "bookkeeper_client_bulk_add_pace_mb_per_s",
            "small_add_beacon_path"}
    mapped = {spec.field for spec in PULSAR_KEYS.values()}
    assert {f.name for f in dataclasses.fields(BrokerConfig)} - mapped == ours


@pytest.mark.parametrize("name, text, kind", [
    ("broker.conf", "port = 1\n", "properties"),  # the extension decides
    ("broker.properties", "a=b\n", "properties"),
    ("broker.toml", "port = 1\n", "toml"),
    ("broker.cfg", '[broker]\nmetadata_store_url = "zk://h:2181"\nport = 7000\n', "toml"),
    ("broker.cfg", "brokerServicePort=6650\n", "properties"),  # valid TOML, but Pulsar's camelCase keys
    ("broker.cfg", "clusterName=standalone\n", "properties"),  # not TOML at all (bare word)
])
def test_file_format_by_extension_then_content(name, text, kind):
    assert file_format(name, text) == kind


def test_flags_and_environment_override_a_properties_file(tmp_path, caplog):
    conf = tmp_path / "broker.conf"
    conf.write_text("metadataStoreUrl=zk:127.0.0.1:2181\nbrokerServicePort=7000\nwebServicePort=7001\n"
                    "clusterName=from-file\nmanagedLedgerDefaultEnsembleSize=3\nmanagedLedgerDefaultWriteQuorum=3\n"
                    "backlogQuotaCheckEnabled=true\nnumIOThreads=\n")
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        cfg = load_config(conf, {"http_port": 7201, "port": None}, environ={"MAGNETAR_BROKER_PORT": "7100"})
    assert (cfg.port, cfg.http_port, cfg.cluster_name, cfg.metadata_store_url) == (7100, 7201, "from-file", "zk://127.0.0.1:2181")
    assert (cfg.managed_ledger_ensemble_size, cfg.managed_ledger_write_quorum, cfg.managed_ledger_ack_quorum) == (3, 3, 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "2 Pulsar settings Magnetar does not support: backlogQuotaCheckEnabled, numIOThreads" in warnings[0]


def test_a_cross_field_problem_names_the_file(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("metadataStoreUrl=zk:127.0.0.1:2181\nbrokerServicePort=\n")  # and no TLS port
    with pytest.raises(PulsarConfigError, match="broker.conf: port and tls_port are both off"):
        load_config(conf, environ={})


def test_docs_list_every_pulsar_key():
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert [key for key in PULSAR_KEYS if f"| `{key}` |" not in page] == []
