"""Topic names at the broker: expansion, validation errors (as the broker's InvalidTopicNameError), partitions and
managed-ledger names. The parser itself is magnetar.topic_name (tests/magnetar_client/test_topic_name.py)."""

import pytest

from broker.errors import InvalidTopicNameError
from broker.topics import names
from broker.topics.names import parse_namespace, parse_topic
from magnetar import topic_name
from magnetar.topic_name import NamespaceName, TopicName


@pytest.mark.parametrize("text, expected", [
    ("my-topic", "persistent://public/default/my-topic"),
    ("t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/with space inside", "persistent://t1/ns1/with space inside"),
    ("orders-partition-3", "persistent://public/default/orders-partition-3"),
    ("non-persistent://t1/ns1/live", "non-persistent://t1/ns1/live"),
])
def test_names_expand_like_pulsar(text, expected):
    assert str(parse_topic(text)) == expected


@pytest.mark.parametrize("text, reason", [
    ("", "empty"),
    ("a/b", "use <topic>"),
    ("persistent://t/ns", "expected persistent://"),
    ("persistent://t/ns/a/b", "expected persistent://"),
    ("non-persistent://t/ns", "expected non-persistent://"),
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
        parse_namespace("just-one")


@pytest.mark.parametrize("broker_side, parser_side, arg", [
    (parse_topic, topic_name.parse_topic, "a/b"),
    (parse_topic, topic_name.parse_topic, "kafka://t/ns/x"),
    (parse_namespace, NamespaceName.parse, "just-one"),
    (parse_namespace, NamespaceName.parse, "t/n$s"),
    (lambda v: names.check_segment("tenant", v), lambda v: topic_name.check_segment("tenant", v), "bad tenant"),
])
def test_the_broker_boundary_keeps_the_parsers_reason_in_its_own_error(broker_side, parser_side, arg):
    with pytest.raises(ValueError) as parser_error:
        parser_side(arg)
    with pytest.raises(InvalidTopicNameError) as broker_error:
        broker_side(arg)
    assert str(broker_error.value) == str(parser_error.value)
