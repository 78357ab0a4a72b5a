"""Bundles as pure arithmetic: ranges, names, topic placement into bundles, and range_equally_divide splits."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.errors import InvalidBundleError
from broker.ownership.bundles import HASH_SPACE, NamespaceBundles, bundle_name, parse_bundle_name, topic_hash
from broker.topics.names import parse_topic


def test_equal_bundles_cover_the_hash_space_without_gaps():
    ranges = NamespaceBundles.equal(4).ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == HASH_SPACE
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert NamespaceBundles.equal(4).names() == [
        "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]


def test_topics_spread_over_bundles_and_partitions_hash_separately():
    bundles = NamespaceBundles.equal(4)
    assert len({bundles.bundle_of(parse_topic(f"t{i}")) for i in range(200)}) == 4
    assert len({bundles.bundle_of(parse_topic("orders").partition(i)) for i in range(16)}) > 1


def test_split_cuts_at_the_midpoint_as_pulsar_writes_it():
    whole = NamespaceBundles.equal(1)
    halves, low, high = whole.split((0, HASH_SPACE))
    assert halves.names() == ["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff"]  # Pulsar's range_equally_divide
    assert (low, high) == ((0, 0x7FFFFFFF), (0x7FFFFFFF, HASH_SPACE))
    quarters, _, _ = halves.split(low)
    assert quarters.names()[:2] == ["0x00000000_0x3fffffff", "0x3fffffff_0x7fffffff"]
    assert low not in quarters and high in quarters


@given(st.lists(st.integers(0, 63), min_size=1, max_size=40), st.integers(0, HASH_SPACE - 1))
def test_after_any_splits_every_hash_is_in_exactly_one_bundle(picks, h):
    bundles = NamespaceBundles.equal(4)
    for pick in picks:
        ranges = bundles.ranges()
        try:
            bundles, _, _ = bundles.split(ranges[pick % len(ranges)])
        except InvalidBundleError:
            pass  # too small to split
    assert sum(lo <= h < hi for lo, hi in bundles.ranges()) == 1
    assert NamespaceBundles.from_json(bundles.to_json()) == bundles


def test_a_topic_lands_in_the_half_that_holds_its_hash():
    bundles = NamespaceBundles.equal(4)
    topic = parse_topic("persistent://public/default/some-topic")
    parent = bundles.bundle_of(topic)
    split, low, high = bundles.split(parent)
    assert split.bundle_of(topic) == (low if topic_hash(topic) < low[1] else high)


def test_json_is_pulsars_bundles_data():
    doc = NamespaceBundles.equal(2).to_json()
    assert doc == {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2}
    assert NamespaceBundles.from_json(doc) == NamespaceBundles.equal(2)


@pytest.mark.parametrize("name, reason", [
    ("nonsense", "expected 0xLO_0xHI"),
    ("0x00000000-0x40000000", "expected 0xLO_0xHI"),
    ("0x00000000_0x40000000_0x80000000", "expected 0xLO_0xHI"),
    ("0x00000000_0x1ffffffff", "expected 0xLO_0xHI"),
    ("0xzz000000_0x40000000", "expected 0xLO_0xHI"),
    ("0x80000000_0x40000000", "lower bound must be below"),
    ("0x40000000_0x40000000", "lower bound must be below"),
])
def test_malformed_bundle_names_are_refused_with_the_reason(name, reason):
    with pytest.raises(InvalidBundleError, match=reason):
        parse_bundle_name(name)


def test_names_round_trip_and_the_top_is_written_0xffffffff():
    for bundle in NamespaceBundles.equal(8).ranges():
        assert parse_bundle_name(bundle_name(bundle)) == bundle
    assert parse_bundle_name("0xc0000000_0xffffffff") == (0xC0000000, HASH_SPACE)


def test_a_range_that_is_not_a_bundle_or_too_small_cannot_be_split():
    bundles = NamespaceBundles.equal(4)
    with pytest.raises(InvalidBundleError, match="not one of the bundles"):
        bundles.split((0, 0x20000000))
    tiny = NamespaceBundles((0, 1, HASH_SPACE))
    with pytest.raises(InvalidBundleError, match="too small"):
        tiny.split((0, 1))


@pytest.mark.parametrize("doc", [
    {"boundaries": ["0x00000000", "0x80000000"], "numBundles": 1},  # does not reach the top
    {"boundaries": ["0x00000000", "0x90000000", "0x80000000", "0xffffffff"], "numBundles": 3},  # not rising
    {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 2},  # count disagrees
    {"numBundles": 4},
])
def test_inconsistent_stored_boundaries_are_refused(doc):
    with pytest.raises(InvalidBundleError):
        NamespaceBundles.from_json(doc)


def test_bundles_requested_at_namespace_creation_by_count_or_boundaries():
    assert NamespaceBundles.requested({"numBundles": 8}, maximum=128) == NamespaceBundles.equal(8)
    given_bounds = {"boundaries": ["0x00000000", "0x10000000", "0xffffffff"], "numBundles": 2}
    assert NamespaceBundles.requested(given_bounds, maximum=128).boundaries == (0, 0x10000000, HASH_SPACE)


@pytest.mark.parametrize("doc, reason", [
    ({"numBundles": 200}, "at most 128"),
    ({"numBundles": 0}, "at least 1 bundle"),
    ({"numBundles": "8"}, "whole number"),
    ({"numBundles": True}, "whole number"),
    ({}, "whole number"),
    (8, "expected an object"),
    ({"boundaries": ["0x00000000", "0x80000000"]}, "must rise strictly from 0x00000000 to 0xffffffff"),
    ({"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 3}, "numBundles 3 but 1 ranges"),
])
def test_bad_bundle_requests_are_refused_naming_the_fault(doc, reason):
    with pytest.raises(InvalidBundleError, match=reason):
        NamespaceBundles.requested(doc, maximum=128)
