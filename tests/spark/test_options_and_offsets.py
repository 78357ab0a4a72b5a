"""The Spark connector's pure parts: option checks, offset parsing, range splitting and the data-loss rule."""

from __future__ import annotations

import pytest

from connectors.spark.offsets import (
    EARLIEST, LedgerInfo, Offset, in_range, lost_range, message_key, parse_offset, range_entries, split_range, topic_url,
)
from connectors.spark.options import MagnetarOptionError, parse_sink_options, parse_source_options
from magnetar.topic_name import split_topic

URL = {"service.url": "pulsar://localhost:6650"}


# ---- options ---------------------------------------------------------------------------


def test_defaults_follow_pulsar_and_kafka():
    o = parse_source_options({**URL, "topic": "events"})
    assert o.topics == ("persistent://public/default/events",)
    assert o.admin_url == "http://localhost:8080"
    assert o.starting == "earliest" and o.ending == "latest"
    assert o.fail_on_data_loss is True and o.max_messages_per_trigger is None
    assert o.subscription.startswith("spark-")
    # the default subscription is stable for the same topics (a restarted query keeps it) and differs otherwise
    assert parse_source_options({**URL, "topic": "events"}).subscription == o.subscription
    assert parse_source_options({**URL, "topic": "other"}).subscription != o.subscription


def test_topics_list_and_pattern():
    o = parse_source_options({**URL, "topics": "a, t/ns/b,a"})
    assert o.topics == ("persistent://public/default/a", "persistent://t/ns/b")
    p = parse_source_options({**URL, "topicsPattern": "persistent://t/ns/orders-.*"})
    assert p.namespace == "t/ns" and p.pattern.fullmatch("persistent://t/ns/orders-eu")
    assert not p.pattern.fullmatch("persistent://t/ns/users")


def test_option_names_are_case_insensitive_as_spark_passes_them():
    o = parse_source_options({"SERVICE.URL": URL["service.url"], "TOPIC": "x", "maxmessagespertrigger": "5"})
    assert o.max_messages_per_trigger == 5


@pytest.mark.parametrize("options, named", [
    ({"topic": "x"}, "service.url"),
    ({**URL}, "exactly one of"),
    ({**URL, "topic": "x", "topics": "y"}, "got topic, topics"),
    ({**URL, "topic": "x", "startOffsets": "earliest"}, "unknown option(s) startOffsets"),
    ({"service.url": "http://h:1", "topic": "x"}, "pulsar://host:port"),
    ({**URL, "topic": "x", "admin.url": "localhost"}, "admin.url"),
    ({**URL, "topic": "x", "startingOffsets": "newest"}, "startingOffsets"),
    ({**URL, "topic": "x", "startingOffsets": "{nope"}, "not valid JSON"),
    ({**URL, "topic": "x", "startingOffsets": '{"x": "a:b"}'}, "must be integers"),
    ({**URL, "topic": "x", "startingOffsets": '{"x": {"entryId": 1}}'}, "ledgerId"),
    ({**URL, "topic": "x", "endingOffsets": "earliest"}, "endingOffsets"),
    ({**URL, "topic": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({**URL, "topic": "x", "maxMessagesPerTrigger": "lots"}, "maxMessagesPerTrigger"),
    ({**URL, "topic": "x", "maxMessagesPerTrigger": "0"}, "at least 1"),
    ({**URL, "topicsPattern": "persistent://t/n.*/x"}, "namespace literally"),
    ({**URL, "topicsPattern": "persistent://t/ns/(unclosed"}, "not a valid regex"),
    ({**URL, "topic": "non-persistent://t/ns/x"}, "only persistent"),
])
def test_bad_options_name_the_option(options, named):
    with pytest.raises((MagnetarOptionError, ValueError)) as err:
        parse_source_options(options)
    assert named in str(err.value)


def test_sink_options():
    assert parse_sink_options({**URL, "topic": "out"}).topic == "persistent://public/default/out"
    assert parse_sink_options({**URL}).topic is None  # rows name their topic
    with pytest.raises(MagnetarOptionError, match="unknown option"):
        parse_sink_options({**URL, "subscription": "s"})


# ---- offsets ---------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("earliest", EARLIEST),
    ("5:7", Offset(5, 7)),
    ("5:7:2", Offset(5, 7, 2)),
    ("5:7:2:10", Offset(5, 7, 2, 10)),
    ({"ledgerId": 5, "entryId": 7, "batchIndex": 3}, Offset(5, 7, 3)),
    ("-1:-1:-1:0", EARLIEST),
])
def test_parse_offset(value, expected):
    assert parse_offset(value) == expected
    assert parse_offset(expected.encode()) == expected  # the stored form round-trips


def test_a_whole_entry_offset_covers_every_message_of_its_batch():
    end = Offset(3, 4)  # the broker's last message id of an unbatched entry, or a batch's "whole entry"
    assert in_range(message_key(3, 4, -1), EARLIEST, end)
    assert in_range(message_key(3, 4, 99), EARLIEST, end)
    assert not in_range(message_key(3, 5, 0), EARLIEST, end)
    mid = Offset(3, 4, 1, 5)  # up to the second message of a batch of five
    assert in_range(message_key(3, 4, 1), EARLIEST, mid) and not in_range(message_key(3, 4, 2), EARLIEST, mid)
    assert in_range(message_key(3, 4, 2), mid, end) and not in_range(message_key(3, 4, 1), mid, end)
    assert Offset(3, 4, 4, 5).covers_whole_entry() and not mid.covers_whole_entry()


def test_topic_names():
    assert topic_url("x") == "persistent://public/default/x"
    assert split_topic("persistent://t/ns/x-partition-2") == ("persistent://t/ns/x", 2)
    assert split_topic("persistent://t/ns/x") == ("persistent://t/ns/x", -1)


# ---- splitting ranges into tasks --------------------------------------------------------

LEDGERS = [LedgerInfo(3, 10), LedgerInfo(7, 4), LedgerInfo(9, 0)]


@pytest.mark.parametrize("start, end, max_entries, expected", [
    # one ledger, small: one task
    (EARLIEST, Offset(3, 9), 100, [(EARLIEST, Offset(3, 9))]),
    # cut at a ledger's end
    (EARLIEST, Offset(7, 3), 100, [(EARLIEST, Offset(3, 9)), (Offset(3, 9), Offset(7, 3))]),
    # cut every 4 entries inside a ledger
    (Offset(3, 1), Offset(3, 9), 4, [(Offset(3, 1), Offset(3, 5)), (Offset(3, 5), Offset(3, 9))]),
    # a start in the middle of a ledger's last batch stays exact, and needs no cut of its own
    (Offset(3, 9, 2, 5), Offset(7, 1), 100, [(Offset(3, 9, 2, 5), Offset(7, 1))]),
    # nothing to read
    (Offset(7, 3), Offset(7, 3), 100, []),
])
def test_split_range(start, end, max_entries, expected):
    assert split_range(start, end, LEDGERS, max_entries) == expected


def test_split_ranges_cover_every_message_exactly_once():
    keys = [message_key(l.ledger_id, e, b) for l in LEDGERS for e in range(l.entries) for b in range(3)]
    start, end = Offset(3, 2, 1, 3), Offset(7, 2)
    parts = split_range(start, end, LEDGERS, 3)
    assert len(parts) > 2
    for key in keys:
        assert sum(in_range(key, a, b) for a, b in parts) == in_range(key, start, end)


# ---- data loss ------------------------------------------------------------------------


@pytest.mark.parametrize("start, ledgers, mark_delete, lost", [
    (EARLIEST, LEDGERS, None, None),  # from the beginning: whatever is stored
    (Offset(3, 4), LEDGERS, None, None),  # its ledger is stored: nothing after it is gone
    (Offset(2, 4), LEDGERS, None, (Offset(2, 4), Offset(3, 0))),  # its ledger is gone
    (Offset(2, 4), LEDGERS, Offset(2, 4), None),  # our subscription held everything after it
    # our cumulative ack of a batch's last message (index 690) left the mark-delete on the whole entry; its ledger
    # then rolled over and was trimmed: nothing after start existed there (a false data loss before)
    (Offset(2, 4, 690, 0), LEDGERS, Offset(2, 4), None),
    (Offset(2, 4, 690, 0), LEDGERS, Offset(2, 5), (Offset(2, 4, 690, 0), Offset(3, 0))),  # one entry past it
    (Offset(2, 4), LEDGERS, Offset(3, 1), (Offset(2, 4), Offset(3, 0))),  # the subscription moved past it
    (Offset(12, 0), LEDGERS, None, None),  # a ledger after the last: nothing of it can have been trimmed
])
def test_lost_range(start, ledgers, mark_delete, lost):
    assert lost_range(start, ledgers, mark_delete) == lost


@pytest.mark.parametrize("start, end, entries", [
    (EARLIEST, Offset(3, 9), 10),
    (Offset(3, 4), Offset(7, 1), 5 + 1 + 2),  # the rest of entry 4 (a batch may continue there), 5..9, then 0..1
    (EARLIEST, Offset(9, -1), 14),
])
def test_range_entries(start, end, entries):
    assert range_entries(start, end, LEDGERS) == entries
