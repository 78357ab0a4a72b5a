"""magnetar.topic_name, the one topic-name parser (client, broker and Spark connector): tables, no I/O."""

import pytest

from connectors.spark.offsets import topic_url
from magnetar.asyncio.dead_letter import base_topic
from magnetar.topic_name import NamespaceName, TopicName, check_segment, parse_topic, split_topic


@pytest.mark.parametrize("text, expected", [
    ("my-topic", "persistent://public/default/my-topic"),
    ("t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/my-topic", "persistent://t1/ns1/my-topic"),
    ("persistent://t1/ns1/with space inside", "persistent://t1/ns1/with space inside"),
    ("orders-partition-3", "persistent://public/default/orders-partition-3"),
    ("t=1/n:s.2/x_y", "persistent://t=1/n:s.2/x_y"),
])
def test_names_expand_like_pulsar(text, expected):
    assert str(parse_topic(text)) == expected
    assert topic_url(text) == expected  # the Spark connector reads names through the same parser


def test_non_persistent_names_keep_their_domain_but_spark_refuses_them():
    topic = parse_topic("non-persistent://t/ns/live")
    assert (topic.domain, topic.persistent, str(topic)) == ("non-persistent", False, "non-persistent://t/ns/live")
    assert topic.managed_ledger_name == "t/ns/non-persistent/live"
    assert parse_topic("live").persistent
    with pytest.raises(ValueError, match="only persistent"):
        topic_url("non-persistent://t/ns/live")


@pytest.mark.parametrize("text, reason", [
    ("", "empty"),
    ("a/b", "use <topic>"),
    ("persistent://t/ns", "expected persistent://"),
    ("persistent://t/ns/a/b", "expected persistent://"),
    ("non-persistent://t/ns/x/y", "expected non-persistent://"),
    ("kafka://t/ns/x", "unknown domain"),
    ("persistent://bad tenant/ns/x", "invalid tenant"),
    ("persistent://t/n$s/x", "invalid namespace"),
    ("persistent://t/ns/ padded", "surrounding spaces"),
    ("persistent://t/ns/ctl\x01", "control characters"),
    ("x" * 2000, "limit is 1024"),
])
def test_invalid_names_raise_value_error_saying_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_topic(text)
    with pytest.raises(ValueError, match=reason):
        topic_url(text)


@pytest.mark.parametrize("text, expected", [
    ("public/default", NamespaceName("public", "default")),
    ("just-one", ValueError),
    ("a/b/c", ValueError),
    ("t/n s", ValueError),
])
def test_namespace_names(text, expected):
    if expected is ValueError:
        with pytest.raises(ValueError):
            NamespaceName.parse(text)
    else:
        assert NamespaceName.parse(text) == expected


@pytest.mark.parametrize("value, ok", [("public", True), ("a-b=c:d.e_f", True), ("", False), ("a b", False),
                                       ("a/b", False)])
def test_segments(value, ok):
    if ok:
        assert check_segment("tenant", value) == value
    else:
        with pytest.raises(ValueError, match="invalid tenant"):
            check_segment("tenant", value)


@pytest.mark.parametrize("name, expected", [
    ("persistent://t/ns/x-partition-2", ("persistent://t/ns/x", 2)),
    ("persistent://t/ns/x", ("persistent://t/ns/x", -1)),
    ("x-partition-10", ("x", 10)),
    ("x-partition-1-partition-2", ("x-partition-1", 2)),
    ("x-partition-", ("x-partition-", -1)),
    ("x-partition-a", ("x-partition-a", -1)),
    ("-partition-3", ("-partition-3", -1)),
    # Pulsar reads the index as a Java int: beyond int32 the name is a topic of its own, not a partition (a
    # partition index that large could not be written into a MessageIdData; the dispatcher failed on it).
    ("x-partition-2147483647", ("x", 2**31 - 1)),
    ("x-partition-2147483648", ("x-partition-2147483648", -1)),
    ("x-partition-99999999999", ("x-partition-99999999999", -1)),
    ("x-partition-" + "9" * 5000, ("x-partition-" + "9" * 5000, -1)),  # past int()'s 4,300-digit limit too
    ("x-partition-" + "0" * 5000 + "7", ("x", 7)),
])
def test_split_topic_is_the_one_partition_rule(name, expected):
    assert split_topic(name) == expected
    assert base_topic(name) == expected[0]  # the client's dead-letter naming uses it too
    local = TopicName("t", "ns", name.rsplit("/", 1)[-1])
    assert local.partition_index == expected[1]
    assert str(local.partitioned_name) == f"persistent://t/ns/{expected[0].rsplit('/', 1)[-1]}"
