"""Broker configuration: defaults < TOML < MAGNETAR_BROKER_* env < flags, with checks that name the field."""

import pytest

from broker.config import load_config


def test_layers_override_in_order(tmp_path):
    toml = tmp_path / "broker.toml"
    toml.write_text('[broker]\nmetadata_store_url = "zk://a:2181"\nport = 7000\nhttp_port = 7001\ncluster_name = "from-file"\n')
    env = {"MAGNETAR_BROKER_PORT": "7100", "MAGNETAR_BROKER_DEDUPLICATION_ENABLED": "true"}
    cfg = load_config(toml, {"http_port": 7201, "port": None}, environ=env)
    assert (cfg.port, cfg.http_port, cfg.cluster_name, cfg.deduplication_enabled) == (7100, 7201, "from-file", True)
    assert cfg.max_message_size == 5 * 1024 * 1024 and cfg.managed_ledger_ensemble_size == 2
    assert cfg.service_url == "pulsar://127.0.0.1:7100"


def test_advertised_address_defaults_to_loopback_for_wildcard_hosts():
    cfg = load_config(overrides={"metadata_store_url": "memory://x", "host": "0.0.0.0"}, environ={})
    assert cfg.advertised_address == "127.0.0.1"


@pytest.mark.parametrize("overrides, message", [
    ({"port": 70000}, "port must be in"),
    ({"allow_auto_topic_creation_type": "sometimes"}, "allow_auto_topic_creation_type"),
    ({"managed_ledger_write_quorum": 3}, "write quorum"),
    ({"max_unacked_messages_per_consumer": -1}, "max_unacked_messages_per_consumer"),
    ({"no_such_option": 1}, "unknown broker config key"),
    ({"stats_sample_interval_s": 0}, "stats_sample_interval_s must be > 0"),
    ({"stats_sample_interval_s": 90}, "must be <= stats_update_frequency_s"),
    ({"stats_sample_interval_s": 0.01}, "must be <= 120"),
])
def test_bad_values_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(overrides={"metadata_store_url": "memory://x", **overrides}, environ={})


def test_metadata_store_is_required():
    with pytest.raises(ValueError, match="metadata_store_url"):
        load_config(overrides={}, environ={})


def test_the_ledger_client_gets_the_entry_bound_and_the_large_adds_pace_from_the_broker_config():
    from storage.client.config import ClientConfig

    env = {"MAGNETAR_BROKER_BOOKKEEPER_CLIENT_BULK_ADD_PACE_MB_PER_S": "16"}
    cfg = load_config(overrides={"metadata_store_url": "memory://x"}, environ=env)
    client = ClientConfig(**cfg.ledger_client_fields()).validate()
    assert client.bulk_add_pace_bytes_per_s == 16 * 1024 * 1024
    assert client.max_entry_bytes == cfg.max_frame_bytes
    assert ClientConfig(**load_config(overrides={"metadata_store_url": "memory://x"}, environ={})
                        .ledger_client_fields()).bulk_add_pace_bytes_per_s == 64 * 1024 * 1024
    with pytest.raises(ValueError, match="bookkeeper_client_bulk_add_pace_mb_per_s"):
        load_config(overrides={"metadata_store_url": "memory://x"},
                    environ={"MAGNETAR_BROKER_BOOKKEEPER_CLIENT_BULK_ADD_PACE_MB_PER_S": "-1"})
