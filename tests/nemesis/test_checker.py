"""The checker on crafted histories: a clean one passes, and each violation kind is flagged (and only it)."""

from __future__ import annotations

import pytest

from loadtest.nemesis.checker import VIOLATIONS, check, longest_gap, seq_of

T = "persistent://public/default/t"


class H:
    """Builds a history the way history.py writes one, with a clock that ticks 0.1 s per event."""

    def __init__(self):
        self.events: list[dict] = []
        self.t = 0.0

    def add(self, **e) -> "H":
        self.t += 0.1
        self.events.append({"t": round(self.t, 3), **e})
        return self

    def send(self, value: str, ledger: int = 10, entry: int | None = None, outcome: str = "ok", topic: str = T,
             partition: int = -1, **extra) -> "H":
        process = value.split(":")[0]
        self.add(f="send", type="invoke", process=process, topic=topic, value=value, **extra)
        done = {"f": "send", "type": outcome, "process": process, "topic": topic, "value": value}
        if outcome == "ok":
            done["id"] = [ledger, entry if entry is not None else seq_of(value)[1], -1, partition]
        return self.add(**done)

    def final(self, *values: str, topic: str = T, partition: int = -1, ledger: int = 10) -> "H":
        for i, v in enumerate(values):
            self.add(f="final-read", type="ok", process="final", topic=topic, value=v, id=[ledger, i, -1, partition])
        return self

    def receive(self, value: str, sub: str, sub_type: str, process: str = "c1", key: str | None = None,
                ack: bool = False) -> "H":
        common = {"process": process, "topic": T, "subscription": sub, "sub_type": sub_type, "value": value,
                  "id": [10, seq_of(value)[1], -1, -1], "key": key}
        self.add(f="receive", type="ok", **common)
        return self.add(f="ack", type="ok", **common) if ack else self


def flagged(events, **kwargs) -> dict[str, int]:
    return {k: v for k, v in check(events, **kwargs).violations.items() if v}


def clean() -> H:
    h = H().send("p1:0").send("p1:1").send("p1:2")
    for v in ("p1:0", "p1:1", "p1:2"):
        h.receive(v, "ex", "Exclusive", ack=True)
    h.add(f="drained", type="ok", process="c1", topic=T, subscription="ex")
    return h.final("p1:0", "p1:1", "p1:2")


def test_a_clean_history_has_no_violation():
    report = check(clean().events, linearizable=True)
    assert report.valid and report.violations == {k: 0 for k in VIOLATIONS}
    assert report.operations["send ok"] == 3


def test_an_acknowledged_send_missing_from_the_final_reads_is_lost():
    h = H().send("p1:0").send("p1:1").final("p1:0")
    report = check(h.events)
    assert flagged(h.events) == {"lost": 1}
    assert report.findings["lost"].examples[0]["value"] == "p1:1"


def test_an_unknown_send_may_be_stored_or_not_and_neither_is_a_violation():
    h = H().send("p1:0", outcome="unknown").send("p1:1", outcome="unknown").final("p1:1")
    report = check(h.events)
    assert report.valid
    assert report.findings["unknown_stored"].count == 1 and report.findings["unknown_absent"].count == 1


def test_a_value_read_but_never_sent_is_a_phantom():
    h = H().send("p1:0").final("p1:0", "p9:4")
    assert flagged(h.events) == {"phantom": 1}


def test_a_definitely_failed_send_that_is_read_is_flagged():
    h = H().send("p1:0", outcome="fail").final("p1:0")
    assert flagged(h.events) == {"failed_but_read": 1}


def test_a_lower_seq_read_after_a_higher_one_of_the_same_producer_is_an_order_violation():
    h = H().send("p1:0").send("p1:1").send("p2:0").final("p1:1", "p2:0", "p1:0")
    assert flagged(h.events) == {"order": 1}


def test_a_key_batching_producer_promises_order_per_key_only():
    h = H().send("p1:0", order_key="a").send("p1:1", order_key="b").send("p1:2", order_key="a")
    h.final("p1:1", "p1:0", "p1:2")
    assert flagged(h.events) == {}
    h = H().send("p1:0", order_key="a").send("p1:1", order_key="b").send("p1:2", order_key="a")
    h.final("p1:2", "p1:1", "p1:0")
    assert flagged(h.events) == {"order": 1}


def test_order_is_per_partition():
    h = H().send("p1:0", partition=0).send("p1:1", partition=1)
    h.final("p1:1", partition=1).final("p1:0", partition=0)
    assert flagged(h.events) == {}


def test_duplicates_are_counted_and_on_a_dedup_topic_they_are_a_violation():
    plain = H().send("p1:0").final("p1:0", "p1:0")
    report = check(plain.events)
    assert report.valid and report.findings["duplicates"].count == 1
    dedup = H().send("p1:0", dedup=True).final("p1:0", "p1:0")
    assert flagged(dedup.events) == {"dedup_duplicates": 1}


def test_a_readable_write_acknowledged_into_an_older_ledger_after_a_newer_one_is_a_fenced_write():
    # p2:0 was acknowledged into ledger 20 (the new owner's) before p1:1 was sent; p1:1's receipt names ledger 10.
    h = H().send("p1:0", ledger=10).send("p2:0", ledger=20, entry=0).send("p1:1", ledger=10)
    h.final("p1:0", ledger=10).final("p2:0", "p1:1", ledger=20)
    report = check(h.events)
    assert flagged(h.events) == {"fenced_read": 1}
    assert report.findings["fenced_writes"].count == 1


def test_an_unreadable_fenced_write_is_counted_and_lost():
    h = H().send("p1:0", ledger=10).send("p2:0", ledger=20, entry=0).send("p1:1", ledger=10)
    h.final("p1:0", ledger=10).final("p2:0", ledger=20)
    assert flagged(h.events) == {"lost": 1}
    assert check(h.events).findings["fenced_writes"].count == 1


def test_a_receipt_for_a_duplicate_the_broker_dropped_is_not_a_fenced_write():
    # With dedup on, a send the client resent after a reconnect is answered with id -1:-1 (already stored).
    h = H().send("p1:0", ledger=20, entry=0, dedup=True).send("p1:1", ledger=20, dedup=True)
    h.add(f="send", type="invoke", process="p1", topic=T, value="p1:2", dedup=True)
    h.add(f="send", type="ok", process="p1", topic=T, value="p1:2", dedup=True, id=[-1, -1, -1, -1])
    h.final("p1:0", "p1:1", "p1:2", ledger=20)
    report = check(h.events, linearizable=True)
    assert report.valid and report.findings["fenced_writes"].count == 0


def test_concurrent_sends_across_a_rollover_are_not_fenced_writes():
    # p1:1 was invoked before p2:0's receipt from the newer ledger: it may legitimately land in the older one.
    h = H()
    h.add(f="send", type="invoke", process="p1", topic=T, value="p1:1")
    h.send("p2:0", ledger=20, entry=0)
    h.add(f="send", type="ok", process="p1", topic=T, value="p1:1", id=[10, 1, -1, -1])
    h.final("p1:1", ledger=10).final("p2:0", ledger=20)
    report = check(h.events)
    assert report.valid and report.findings["fenced_writes"].count == 0


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
def test_an_exclusive_or_failover_consumer_getting_a_skipped_message_late_is_flagged(sub_type):
    h = H().send("p1:0").send("p1:1").send("p1:2")
    h.receive("p1:0", "s", sub_type).receive("p1:2", "s", sub_type).receive("p1:1", "s", sub_type)
    h.final("p1:0", "p1:1", "p1:2")
    assert flagged(h.events) == {"ordered_delivery": 1}


def test_a_redelivery_that_rewinds_is_not_an_order_violation_and_acked_then_redelivered_is_counted():
    h = H().send("p1:0").send("p1:1")
    h.receive("p1:0", "s", "Failover", ack=True).receive("p1:1", "s", "Failover")
    h.receive("p1:0", "s", "Failover").receive("p1:1", "s", "Failover")  # the consumer reconnected: rewound
    h.final("p1:0", "p1:1")
    report = check(h.events)
    assert report.valid
    assert report.findings["acked_redelivered"].count == 1


def test_shared_subscriptions_have_no_order_to_break():
    h = H().send("p1:0").send("p1:1")
    h.receive("p1:1", "s", "Shared", process="c1").receive("p1:0", "s", "Shared", process="c2")
    assert flagged(h.final("p1:0", "p1:1").events) == {}


def test_key_shared_order_is_per_key():
    ok = H().send("p1:0").send("p1:1").send("p1:2")
    ok.receive("p1:1", "s", "Key_Shared", key="b").receive("p1:0", "s", "Key_Shared", key="a")
    ok.receive("p1:2", "s", "Key_Shared", key="a")
    assert flagged(ok.final("p1:0", "p1:1", "p1:2").events) == {}
    bad = H().send("p1:0").send("p1:1")
    bad.receive("p1:1", "s", "Key_Shared", key="a").receive("p1:0", "s", "Key_Shared", key="a")
    assert flagged(bad.final("p1:0", "p1:1").events) == {"key_order": 1}


def test_a_drained_subscription_missing_an_acknowledged_message_is_flagged():
    h = H().send("p1:0").send("p1:1").receive("p1:0", "s", "Shared")
    h.add(f="drained", type="ok", process="c1", topic=T, subscription="s")
    assert flagged(h.final("p1:0", "p1:1").events) == {"subscription_missing": 1}


def test_linearizable_acknowledged_order_must_equal_read_order():
    h = H().send("w:0", linearizable=True).send("w:1", outcome="unknown", linearizable=True)
    h.send("w:2", linearizable=True).send("w:3", outcome="unknown", linearizable=True)
    h.final("w:0", "w:2", "w:3")  # an unknown send may be stored or not; the acknowledged ones keep their order
    assert flagged(h.events, linearizable=True) == {}
    swapped = H().send("w:0", entry=1, linearizable=True).send("w:1", entry=0, linearizable=True)
    swapped.final("w:1", "w:0")
    found = check(swapped.events, linearizable=True).findings["linearizable"]
    assert {x["what"] for x in found.examples} == {"acknowledged order != read order",
                                                   "acknowledged ids went backwards"}
    assert flagged(swapped.events) == {"order": 1}  # without --linearizable only per-producer order sees it


def test_linearizable_a_reader_must_never_go_backwards():
    h = H().send("w:0", linearizable=True).send("w:1", linearizable=True)
    for v, entry in (("w:0", 0), ("w:1", 1), ("w:0", 0)):
        h.add(f="read", type="ok", process="r1", topic=T, value=v, id=[10, entry, -1, -1])
    h.final("w:0", "w:1")
    found = check(h.events, linearizable=True).findings["linearizable"]
    assert found.count == 1 and found.examples[0]["what"] == "a reader went backwards"


def test_unavailability_is_the_longest_ack_gap_overlapping_each_fault():
    h = H()
    for t in (1.0, 1.5, 2.0, 6.0, 6.5):
        h.events.append({"t": t, "f": "send", "type": "ok", "process": "p1", "topic": T, "value": "x", "id": None})
    h.events.append({"t": 2.1, "f": "fault", "type": "invoke", "fault_id": "1", "kind": "kill-broker"})
    h.events.append({"t": 5.0, "f": "fault", "type": "ok", "fault_id": "1", "kind": "kill-broker"})
    h.events.append({"t": 6.2, "f": "fault", "type": "invoke", "fault_id": "2", "kind": "kill-bookie"})
    h.events.append({"t": 6.4, "f": "fault", "type": "ok", "fault_id": "2", "kind": "kill-bookie"})
    windows = check(sorted(h.events, key=lambda e: e["t"])).unavailability
    assert windows["kill-broker"]["max"] == pytest.approx(4.0)
    assert windows["kill-bookie"]["max"] == pytest.approx(0.5)


@pytest.mark.parametrize("times,start,end,gap", [
    ([], 0, 1, 0.0),
    ([0.0, 1.0, 2.0], 5.0, 6.0, 4.0),  # nothing acknowledged since 2.0: open at the window's end
    ([0.0, 3.0, 3.1, 10.0], 1.0, 2.0, 3.0),
    ([0.0, 0.1, 0.2, 9.0], 5.0, 6.0, 8.8),
])
def test_longest_gap(times, start, end, gap):
    assert longest_gap(times, start, end) == pytest.approx(gap)


def test_values_of_another_shape_are_refused():
    with pytest.raises(ValueError):
        seq_of("no-seq")
