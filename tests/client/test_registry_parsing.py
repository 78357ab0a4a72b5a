"""Registration parsing and address fallback (pure)."""

import pytest

from storage.client.registry import parse_address, parse_registration


def test_full_registration():
    info = parse_registration(
        "b1", b'{"bookie_id": "b1", "address": "10.0.0.1:3181", "http_address": "10.0.0.1:8000", '
        b'"network_location": "/zone-a/ud2", "state": "writable"}', True)
    assert (info.address, info.zone, info.upgrade_domain, info.writable) == ("10.0.0.1:3181", "zone-a", "ud2", True)
    assert info.http_address == "10.0.0.1:8000"


def test_readonly_path_or_state_means_not_writable():
    assert not parse_registration("b1", b'{"state": "writable"}', False).writable
    assert not parse_registration("b1", b'{"state": "readonly"}', True).writable


def test_garbage_data_falls_back_to_id_and_default_location():
    info = parse_registration("127.0.0.1:3181", b"\xff not json", True)
    assert info.address == "127.0.0.1:3181"
    assert (info.zone, info.upgrade_domain) == ("default-zone", "default-upgradedomain")
    bad_loc = parse_registration("b", b'{"network_location": "nozone"}', True)
    assert bad_loc.zone == "default-zone"


@pytest.mark.parametrize("text, expected", [("127.0.0.1:3181", ("127.0.0.1", 3181)), ("[::1]:4000", ("::1", 4000)),
                                            ("host.example:1", ("host.example", 1))])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["bookie-1", "host:", ":3181", "host:port"])
def test_parse_address_rejects(text):
    with pytest.raises(ValueError):
        parse_address(text)
