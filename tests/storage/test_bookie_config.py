from pathlib import Path

import pytest

from storage.bookie.config import load_config
from storage.network_location import parse_network_location


def test_precedence_defaults_toml_env_flags(tmp_path):
    toml = tmp_path / "bookie.toml"
    toml.write_text('[bookie]\nport = 4000\nhttp_port = 4001\njournal_max_group_wait_ms = 5.0\n')
    cfg = load_config(
        toml,
        overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path), "http_port": 4002},
        environ={"MAGNETAR_BOOKIE_JOURNAL_MAX_GROUP_WAIT_MS": "1.5", "MAGNETAR_BOOKIE_JOURNAL_SYNC_DATA": "false"},
    )
    assert cfg.port == 4000  # TOML
    assert cfg.journal_max_group_wait_ms == 1.5  # env beats TOML
    assert cfg.journal_sync_data is False
    assert cfg.http_port == 4002  # flag beats TOML
    assert cfg.journal_dir == Path(tmp_path) / "journal" and cfg.bookie_id == "127.0.0.1:4000"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"network_location": "zone-a"}, "network location must look like /zone/upgradeDomain"),
        ({"disk_usage_threshold": 0.5, "disk_usage_lwm_threshold": 0.9}, "disk_usage_lwm_threshold"),
        ({"port": 0}, "port must be in 1..65535"),
        ({"bogus_key": 1}, "unknown bookie config key 'bogus_key'"),
    ],
)
def test_invalid_config_names_the_field(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path), **overrides}, environ={})


def test_missing_required_fields():
    with pytest.raises(ValueError, match="needs metadata_store_url"):
        load_config(overrides={"data_dir": "/tmp/x"}, environ={})


def test_network_location_parts():
    assert parse_network_location("/zone-a/ud1") == ("zone-a", "ud1")
