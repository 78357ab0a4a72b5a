"""Topic names: expansion, validation errors, partitions and managed-ledger names."""

import pytest

from broker.errors import InvalidTopicNameError
from broker.topics.names import NamespaceName, TopicName, parse_topic


@pytest.mark.parametrize("text, expected", [
    ("my-topic", "persistent://public/default/my-topic"),
    ("t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/with space inside", "persistent://t1/ns1/with space inside"),
    ("orders-partition-3", "persistent://public/default/orders-partition-3"),
])
def test_names_expand_like_pulsar(text, expected):
    assert str(parse_topic(text)) == expected


@pytest.mark.parametrize("text, reason", [
    ("", "empty"),
    ("a/b", "use <topic>"),
    ("persistent://t/ns", "expected persistent://"),
    ("persistent://t/ns/a/b", "expected persistent://"),
    ("non-persistent://t/ns/x", "not supported"),
    ("kafka://t/ns/x", "unknown domain"),
    ("persistent://bad tenant/ns/x", "invalid tenant"),
    ("persistent://t/n$s/x", "invalid namespace"),
    ("persistent://t/ns/ padded", "surrounding spaces"),
    ("persistent://t/ns/ctl\x01", "control characters"),
    ("x" * 2000, "limit is 1024"),
])
def test_invalid_names_say_why(text, reason):
    with pytest.raises(InvalidTopicNameError, match=reason):
        parse_topic(text)


def test_partitions_and_their_parent():
    topic = parse_topic("persistent://t/ns/orders")
    p2 = topic.partition(2)
    assert str(p2) == "persistent://t/ns/orders-partition-2"
    assert p2.partition_index == 2 and topic.partition_index == -1
    assert p2.partitioned_name == topic


def test_managed_ledger_name_round_trips_with_encoding():
    topic = parse_topic("persistent://t/ns/a topic:with%odd/chars".replace("/chars", "-chars"))
    name = topic.managed_ledger_name
    assert name.startswith("t/ns/persistent/") and " " not in name and name.count("/") == 3
    assert TopicName.from_managed_ledger_name(name) == topic


def test_namespace_names():
    assert str(NamespaceName.parse("public/default")) == "public/default"
    with pytest.raises(InvalidTopicNameError):
        NamespaceName.parse("just-one")
