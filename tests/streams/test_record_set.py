"""The record-set codec (byte vectors) and the stream policies (tables): pure, no I/O."""

from __future__ import annotations

import pytest

from broker.streams import record_set
from broker.streams.errors import StreamApiError
from broker.streams.policies import Placement, Policies, Retention, Rolling, parse_namespace, check_stream_name
from broker.streams.record_set import RecordSetError


def test_a_record_set_has_the_documented_bytes():
    data = record_set.encode(7, 1000, [b"ab", b""])
    assert data == (b"MS\x01\x00" + (7).to_bytes(8, "big") + (1000).to_bytes(8, "big") + (2).to_bytes(4, "big")
                    + (2).to_bytes(4, "big") + b"ab" + (0).to_bytes(4, "big"))
    assert record_set.decode(data) == (7, 1000, [b"ab", b""])
    assert record_set.encoded_size([b"ab", b""]) == len(data)


@pytest.mark.parametrize("data, reason", [
    (b"MS\x01", "header bytes"),
    (b"XX\x01\x00" + bytes(20), "not a version-1"),
    (b"MS\x02\x00" + bytes(20), "not a version-1"),
    (b"MS\x01\x00" + bytes(16) + (5).to_bytes(4, "big"), "cannot hold 5 records"),
    (b"MS\x01\x00" + bytes(16) + (1).to_bytes(4, "big") + (9).to_bytes(4, "big") + b"abc", "run past"),
    (record_set.encode(0, 0, [b"a"]) + b"!", "after the last"),
])
def test_a_malformed_record_set_is_refused_with_the_reason(data, reason):
    with pytest.raises(RecordSetError, match=reason):
        record_set.decode(data)


@pytest.mark.parametrize("text, expected", [("wal", "public/wal"), ("t/ns", "t/ns")])
def test_namespace_names(text, expected):
    assert str(parse_namespace(text)) == expected


@pytest.mark.parametrize("bad", ["", "a/b/c", "a b", "x" * 300])
def test_bad_namespace_names_are_refused(bad):
    with pytest.raises(StreamApiError) as info:
        parse_namespace(bad)
    assert info.value.code_name == "InvalidStreamRequest"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a b", "y" * 300])
def test_bad_stream_names_are_refused(bad):
    with pytest.raises(StreamApiError):
        check_stream_name(bad)


@pytest.mark.parametrize("policies, message", [
    (Policies(Placement(2, 3, 2)), "ensemble_size >= write_quorum"),
    (Policies(Placement(3, 3, 2, min_zones=4)), "min_zones"),
    (Policies(Placement(17, 3, 2)), "16 >= ensemble_size"),
    (Policies(rolling=Rolling(max_bytes=10)), "max_bytes"),
    (Policies(rolling=Rolling(max_entries=0)), "max_entries"),
    (Policies(retention=Retention(time_s=-5)), "time_s"),
    (Policies(retention=Retention(size_bytes=-2)), "size_bytes"),
])
def test_bad_policies_are_refused_naming_the_field(policies, message):
    with pytest.raises(StreamApiError, match=message):
        policies.validate()


def test_a_stream_inherits_its_namespace_policies_and_overrides_rolling_and_retention():
    ns = Policies(Placement(3, 3, 2, 3), Rolling(100, 1 << 20, 60), Retention(3600, -1))
    stream = ns.with_overrides({"rolling": {"max_bytes": 64 * 1024}, "retention": {"time_s": -1}})
    assert stream.placement == ns.placement
    assert stream.rolling == Rolling(100, 64 * 1024, 60) and stream.retention == Retention(-1, -1)
    config = stream.ml_config(cache_size_mb=8)
    assert (config.ensemble_size, config.write_quorum_size, config.ack_quorum_size) == (3, 3, 2)
    assert config.max_size_per_ledger_bytes == 64 * 1024 and config.max_entries_per_ledger == 100
    assert config.min_ledger_rollover_time_s == 0 and config.max_ledger_rollover_time_s == 60
    assert (config.retention_time_s, config.retention_size_mb) == (-1, -1)
