"""Advertised listeners: parsing and validation, and which address a lookup answers, from tables."""

from __future__ import annotations

import pytest

from broker.errors import ServiceNotReadyError
from broker.ownership.listeners import AdvertisedListener, ListenerConfigError, internal_listener, parse_listeners
from broker.ownership.ownership import BrokerInfo

TWO = "internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,external:pulsar://broker.example:16650"


def test_listeners_parse_in_order_with_one_address_per_scheme():
    assert parse_listeners(TWO, tls_port=True) == (
        AdvertisedListener("internal", "pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"),
        AdvertisedListener("external", "pulsar://broker.example:16650"),
    )
    assert parse_listeners(None) == () and parse_listeners("  ") == ()
    assert parse_listeners("a:pulsar://h:1, a:http://h:2, a:https://h:3") == (
        AdvertisedListener("a", "pulsar://h:1", None, "http://h:2", "https://h:3"),)


@pytest.mark.parametrize("text, kwargs, message", [
    ("pulsar://h:6650", {}, "has no listener name"),
    ("a:pulsar://h:1,a:pulsar://h:2", {}, "listener 'a' has more than one pulsar://"),
    ("a:pulsar://h:1,b:pulsar://h:1", {}, "h:1 is given to both listener 'a' and 'b'"),
    ("a:http://h:1", {}, "neither a pulsar:// nor a pulsar\\+ssl://"),
    ("a:kafka://h:1", {}, "scheme must be pulsar"),
    ("a:pulsar://h", {}, "want pulsar://host:port"),
    ("a:pulsar://h:1/path", {}, "want pulsar://host:port"),
    ("a b:pulsar://h:1", {}, "listener name 'a b'"),
    ("a:pulsar+ssl://h:1", {}, "brokerServicePortTls is not set"),
    ("a:pulsar://h:1", {"plain_port": False, "tls_port": True}, "brokerServicePort is off"),
])
def test_malformed_listeners_are_refused_by_entry(text, kwargs, message):
    with pytest.raises(ListenerConfigError, match=message):
        parse_listeners(text, **kwargs)


def test_internal_listener_is_the_named_one_or_the_first():
    listeners = parse_listeners(TWO, tls_port=True)
    assert internal_listener(listeners, None).name == "internal"
    assert internal_listener(listeners, "external").name == "external"
    assert internal_listener((), None) is None
    with pytest.raises(ListenerConfigError, match="'nope' is not one of the advertisedListeners"):
        internal_listener(listeners, "nope")
    with pytest.raises(ListenerConfigError, match="advertisedListeners is empty"):
        internal_listener((), "internal")


def test_a_lookup_answers_under_the_listener_the_client_named():
    owner = BrokerInfo("10.0.0.5:6650", "pulsar://10.0.0.5:6650", "http://10.0.0.5:8080",
                       "pulsar+ssl://10.0.0.5:6651", listeners=parse_listeners(TWO, tls_port=True))
    assert owner.lookup_urls(None) == ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651")
    assert owner.lookup_urls("") == ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651")
    assert owner.lookup_urls("external") == ("pulsar://broker.example:16650", None)
    with pytest.raises(ServiceNotReadyError, match="no advertised listener named 'test' \\(its listeners: external, internal\\)"):
        owner.lookup_urls("test")
    plain = BrokerInfo("h:6650", "pulsar://h:6650", "http://h:8080")
    with pytest.raises(ServiceNotReadyError, match="its listeners: none"):
        plain.lookup_urls("test")  # what the official client's listener_name conformance test expects


def test_broker_info_carries_its_listeners_through_the_metadata_store_json():
    info = BrokerInfo("10.0.0.5:6650", None, "http://10.0.0.5:8080", "pulsar+ssl://10.0.0.5:6651", None,
                      parse_listeners(TWO, tls_port=True))
    assert BrokerInfo.from_json(info.to_json()) == info
    older = {"brokerId": "h:1", "nativeUrl": "pulsar://h:1", "httpUrl": "http://h:2"}  # a broker before listeners
    assert BrokerInfo.from_json(older) == BrokerInfo("h:1", "pulsar://h:1", "http://h:2")
