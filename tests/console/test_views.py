"""The console's pure rules from tables: paging bounds, node decoding and redaction, the zone rule per write
set, entry rendering, bookie rows and the health verdicts with their reasons."""

from __future__ import annotations

import json

import msgpack
import pytest

from broker.console import views
from storage.ledger_metadata import LedgerMetadata, LedgerState


@pytest.mark.parametrize("query, expected", [
    ({}, views.Page(0, 50, "")),
    ({"offset": "100", "limit": "500", "filter": "t-1"}, views.Page(100, 500, "t-1")),
    ({"offset": "", "limit": ""}, views.Page(0, 50, "")),
])
def test_parse_page(query, expected):
    assert views.parse_page(query) == expected


@pytest.mark.parametrize("query, complaint", [
    ({"limit": "0"}, "limit must be an integer in 1..500"),
    ({"limit": "501"}, "limit must be an integer in 1..500"),
    ({"offset": "-1"}, "offset must be an integer"),
    ({"offset": "1e3"}, "offset must be an integer"),
    ({"offset": "9" * 40}, "offset must be an integer"),
    ({"filter": "x" * 201}, "filter must be at most 200 characters"),
])
def test_parse_page_refuses_out_of_bounds(query, complaint):
    with pytest.raises(views.ConsoleRequestError, match=complaint):
        views.parse_page(query)


def test_page_of_filters_then_pages():
    names = [f"t-{i:04d}" for i in range(1000)]
    assert views.page_of(names, views.Page(0, 3)) == (["t-0000", "t-0001", "t-0002"], 1000)
    assert views.page_of(names, views.Page(998, 50)) == (["t-0998", "t-0999"], 1000)
    assert views.page_of(names, views.Page(1, 2, "t-09")) == (["t-0901", "t-0902"], 100)
    assert views.page_of(names, views.Page(0, 2, "nope")) == ([], 0)


@pytest.mark.parametrize("data, encoding, value", [
    (b"", "empty", None),
    (b'{"a": 1, "password": "ab12"}', "json", {"a": 1, "password": views.REDACTED}),
    (b"[1, 2]", "json", [1, 2]),
    (msgpack.packb({"mark_delete": [3, 4], 1: b"\x00\x01"}), "msgpack", {"mark_delete": [3, 4], "1": {"hex": "0001"}}),
    (msgpack.packb([{"token": "s3cret"}]), "msgpack", [{"token": views.REDACTED}]),
    (b"127.0.0.1:6650", "utf-8", "127.0.0.1:6650"),
    (b"\xff\xfe\x00", "binary", "fffe00"),
    (b"\x05", "binary", "05"),  # a lone msgpack scalar is not taken for msgpack
])
def test_decode_node(data, encoding, value):
    decoded = views.decode_node(data)
    assert (decoded["encoding"], decoded["value"], decoded["size"]) == (encoding, value, len(data))
    json.dumps(decoded)  # always answerable as JSON


def test_redact_reaches_every_depth():
    doc = {"list": [{"authParams": "x", "keep": 1}], "nested": {"secret": {"a": 1}, "password": None}}
    assert views.redact(doc) == {"list": [{"authParams": views.REDACTED, "keep": 1}],
                                 "nested": {"secret": views.REDACTED, "password": views.REDACTED}}


def test_long_text_nodes_are_cut():
    decoded = views.decode_node(b"x" * (views.MAX_NODE_BYTES_SHOWN + 10))
    assert decoded["truncated"] and len(decoded["value"]) == views.MAX_NODE_BYTES_SHOWN


@pytest.mark.parametrize("path, expected", [
    ("/", "/"), ("/managed-ledgers", "/managed-ledgers"), ("/ledgers/00/0000/", "/ledgers/00/0000"),
])
def test_metadata_paths(path, expected):
    assert views.check_metadata_path(path) == expected


@pytest.mark.parametrize("path", ["", "ledgers", "/a//b", "/a/../b", "/./a", "/" + "x" * 1024])
def test_metadata_paths_refused(path):
    with pytest.raises(views.ConsoleRequestError):
        views.check_metadata_path(path)


@pytest.mark.parametrize("qw, zones, need", [(2, 3, 2), (3, 3, 2), (1, 3, 1), (2, 1, 1), (3, 0, 1)])
def test_zone_rule_need(qw, zones, need):
    assert views.zone_rule_need(qw, zones) == need


def _md(e, qw, ensembles, state=LedgerState.CLOSED, last=9):
    return LedgerMetadata(ledger_id=7, ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qw, password=b"pw",
                          ensembles=tuple((f, tuple(b)) for f, b in ensembles), state=state, last_entry_id=last,
                          custom={"managed-ledger": "public/default/persistent/t", "password": "x"})


ZONES = {"b1": "a", "b2": "b", "b3": "c", "b4": "a"}


def test_ledger_view_checks_every_write_set_of_every_fragment():
    md = _md(3, 2, [(0, ["b1", "b2", "b3"]), (5, ["b1", "b4", "b3"])])
    view = views.ledger_view(md, ZONES, zones_in_cluster=3)
    first, second = view["fragments"]
    assert (first["firstEntryId"], first["lastEntryId"], second["firstEntryId"], second["lastEntryId"]) == (0, 4, 5, 9)
    assert first["meetsZoneRule"] and [s["zones"] for s in first["writeSets"]] == [["a", "b"], ["b", "c"], ["a", "c"]]
    # b1 and b4 are both in zone a: the write set starting at position 0 spans one zone.
    assert [s["meetsZoneRule"] for s in second["writeSets"]] == [False, True, True]
    assert not second["meetsZoneRule"] and not view["meetsZoneRule"]
    assert second["ensemble"][1] == {"bookieId": "b4", "zone": "a"}
    assert view["customMetadata"]["password"] == views.REDACTED and "password" not in json.dumps(view).replace(
        '"password": "<redacted>"', "")


def test_a_gone_bookie_counts_for_no_zone_and_one_zone_clusters_need_one():
    md = _md(2, 2, [(0, ["b1", "gone"])], state=LedgerState.OPEN, last=-1)
    view = views.ledger_view(md, ZONES, zones_in_cluster=3)
    assert view["fragments"][0]["ensemble"][1]["zone"] is None and not view["meetsZoneRule"]
    assert view["fragments"][0]["lastEntryId"] == -1 and view["state"] == "OPEN"
    assert views.ledger_view(_md(2, 2, [(0, ["b1", "b4"])]), ZONES, zones_in_cluster=1)["meetsZoneRule"]


@pytest.mark.parametrize("payload, utf8, valid, truncated", [
    (b"hello", "hello", True, False),
    (b"\x0e\x01hi \xff", "\x0e\x01hi \ufffd", False, False),
    ("é".encode() * 2048 + b"!", "é" * 2048, True, True),  # cut exactly at the limit
    (b"a" + "é".encode() * 2048, "a" + "é" * 2047 + "\ufffd", True, True),  # a character cut in two
])
def test_entry_view(payload, utf8, valid, truncated):
    view = views.entry_view(3, payload)
    assert (view["utf8"], view["utf8Valid"], view["truncated"], view["size"]) == (utf8, valid, truncated, len(payload))
    assert bytes.fromhex(view["hex"]) == payload[:views.MAX_ENTRY_BYTES_SHOWN]


@pytest.mark.parametrize("raw, expected", [("first", "first"), ("last", "last"), ("0", 0), ("42", 42)])
def test_entry_selector(raw, expected):
    assert views.parse_entry_selector(raw) == expected


@pytest.mark.parametrize("raw", ["middle", "-1", "1.5", str(2**63), "9" * 30])
def test_entry_selector_refused(raw):
    with pytest.raises(views.ConsoleRequestError):
        views.parse_entry_selector(raw)
    with pytest.raises(views.ConsoleRequestError):
        views.parse_ledger_id(raw)


def _reg(bookie_id, zone, state="writable", ud="ud0"):
    return {"bookieId": bookie_id, "state": state, "zone": zone, "upgradeDomain": ud, "address": "h:1",
            "httpAddress": "h:2", "networkLocation": f"/{zone}/{ud}"}


def _info(usage=0.2, p99=1.0, reason=""):
    return {"disk_usage_fraction": usage, "disk_total_bytes": 100, "disk_free_bytes": 80, "ledgers": 3,
            "state_reason": reason, "journal_fsync_latency": {"count": 10, "p50_ms": 0.5, "p99_ms": p99, "max_ms": p99}}


def test_bookie_rows_mark_cookies_without_registration_down_and_sort_by_zone():
    rows = views.bookie_rows([_reg("b2", "b"), _reg("b1", "a")], ["b1", "b2", "b9"],
                             {"b1": _info(), "b2": "TimeoutError from h:2"})
    assert [(r["bookieId"], r["state"]) for r in rows] == [("b1", "writable"), ("b2", "writable"), ("b9", "down")]
    assert rows[0]["diskUsage"] == 0.2 and rows[0]["journalFsyncLatency"]["p99_ms"] == 1.0
    assert rows[1]["infoError"] == "TimeoutError from h:2"


def _rows(*specs):
    return views.bookie_rows([_reg(b, z, s) for b, z, s, _ in specs], [b for b, *_ in specs],
                             {b: i for b, _, _, i in specs})


BROKERS = [{"brokerId": "b:1"}]


@pytest.mark.parametrize("bookies, brokers, leader, expected", [
    (_rows(("b1", "a", "writable", _info()), ("b2", "b", "writable", _info())), BROKERS, "b:1", []),
    (_rows(("b1", "a", "writable", _info()), ("b2", "b", "readonly", _info(reason="disk usage 0.96 > 0.95"))),
     BROKERS, "b:1",
     [("red", "bookies", "1 writable bookie, but new ledgers need an ensemble of 2"),
      ("amber", "bookies", "writable bookies are in 1 zone"),
      ("amber", "bookie b2", "read-only: disk usage 0.96 > 0.95")]),
    (_rows(("b1", "a", "writable", _info(usage=0.9)), ("b2", "b", "writable", _info(usage=0.97, p99=250.0))),
     BROKERS, None,
     [("amber", "bookie b1", "disk 90% full"), ("red", "bookie b2", "disk 97% full"),
      ("amber", "bookie b2", "journal fsync p99 250 ms over the last 10 syncs"),
      ("amber", "brokers", "no load-balancer leader")]),
    (_rows(("b1", "a", "writable", _info()), ("b2", "b", "writable", _info()), ("b3", "c", "writable", "refused")),
     [], None,
     [("amber", "bookie b3", "its HTTP info could not be read: refused"),
      ("red", "brokers", "no broker is registered")]),
])
def test_health_findings(bookies, brokers, leader, expected):
    findings = views.health_findings(bookies, brokers, leader, ensemble_size=2)
    assert [(f["level"], f["subject"]) for f in findings] == [(lvl, subj) for lvl, subj, _ in expected]
    for finding, (_, _, reason) in zip(findings, expected):
        assert reason in finding["reason"]
    assert views.health_level(findings) == ("green" if not expected else
                                            "red" if any(e[0] == "red" for e in expected) else "amber")


def test_under_replicated_ledgers_are_amber():
    rows = views.bookie_rows([_reg("b1", "a"), _reg("b2", "b")], ["b1", "b2"], {"b1": _info(), "b2": _info()})
    findings = views.health_findings(rows, BROKERS, "b:1", ensemble_size=2, under_replicated=3)
    assert findings == [{"level": "amber", "subject": "ledgers", "reason":
                         "3 ledgers are under-replicated: autorecovery copies their fragments to other bookies"}]


def test_a_down_bookie_is_amber_with_its_reason():
    rows = views.bookie_rows([_reg("b1", "a"), _reg("b2", "b")], ["b1", "b2", "b3"], {"b1": _info(), "b2": _info()})
    findings = views.health_findings(rows, BROKERS, "b:1", ensemble_size=2)
    assert findings == [{"level": "amber", "subject": "bookie b3",
                         "reason": "down: registered no more (its cookie remains)"}]
