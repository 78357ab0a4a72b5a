"""The checker: reads a history (and its final reads) and says what went wrong. Pure functions, no I/O.

How a history looks (one dict per JSON line, history.py writes them):

* ``f="send"``: ``invoke`` (``process``, ``topic``, ``value``, ``key``, ``dedup``), then ``ok`` with the message
  ``id`` [ledger, entry, batch, partition], ``fail`` (definitely not stored) or ``unknown`` (maybe stored: a
  timeout or a lost connection after the message left).
* ``f="receive"`` / ``f="ack"``: a consumer (``process``) on ``subscription`` of ``sub_type`` got / acknowledged
  ``value`` with ``id``; ``f="read"``: a tailing reader got one.
* ``f="final-read"``: after the faults healed, a reader from the earliest position read each partition to its end.
* ``f="fault"``: the nemesis injected (``invoke``) and healed (``ok``) a fault of ``kind``.

A value is ``"<producer>:<seq>"``: its producer and its place in that producer's send order. Each producer sends
in order, so per partition its values must be read with rising ``seq`` -- per key when its send carries an
``order_key`` (key-based batching sends each key's batch on its own, so only per-key order is promised).

What counts as a violation (each must be 0): lost (acknowledged, not in the final reads), phantom (read, never
sent), failed-but-read (a definite failure that became readable), per-producer order (a lower seq read after a
higher one in the final reads), fenced (a send acknowledged into an older ledger than one the same partition had
already acknowledged into before the send started -- a stale owner's write -- that is readable), duplicates on a
dedup topic, Exclusive/Failover per-producer delivery order, Key_Shared per-key order, and, with
``--linearizable``, acknowledged order != read order or a reader going backwards. Counted but allowed: duplicates
without dedup, acknowledged-then-redelivered, unknown sends that were (or were not) stored.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from storage.latency import percentile

EXAMPLES = 5  # examples kept per finding: enough to start debugging, small enough for the report
ORDERED_TYPES = ("Exclusive", "Failover")


def seq_of(value: str) -> tuple[str, int]:
    """``"p3:17"`` -> ("p3", 17). Raises ValueError for anything else (a phantom with a foreign shape)."""
    producer, sep, seq = value.rpartition(":")
    if not sep or not producer or not seq.isdigit():
        raise ValueError(f"not a nemesis value: {value!r}")
    return producer, int(seq)


def _partition(event: dict) -> tuple[str, int]:
    message_id = event.get("id") or [-1, -1, -1, -1]
    return event["topic"], message_id[3]


@dataclass
class Finding:
    """One kind of anomaly: how many, and a few examples."""

    count: int = 0
    examples: list = field(default_factory=list)

    def add(self, example, n: int = 1) -> None:
        self.count += n
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


VIOLATIONS = ("lost", "phantom", "failed_but_read", "order", "fenced_read", "dedup_duplicates", "ordered_delivery",
              "key_order", "subscription_missing", "linearizable")
COUNTS = ("duplicates", "acked_redelivered", "fenced_writes", "unknown_stored", "unknown_absent")


@dataclass
class Report:
    operations: dict[str, int] = field(default_factory=dict)  # "send ok" -> count, ...
    findings: dict[str, Finding] = field(default_factory=lambda: {k: Finding() for k in (*VIOLATIONS, *COUNTS)})
    unavailability: dict[str, dict] = field(default_factory=dict)  # fault kind -> gap percentiles

    @property
    def violations(self) -> dict[str, int]:
        return {k: self.findings[k].count for k in VIOLATIONS}

    @property
    def valid(self) -> bool:
        return not any(self.violations.values())

    def to_json(self) -> dict:
        return {"valid": self.valid, "operations": self.operations,
                "findings": {k: {"count": f.count, "examples": f.examples} for k, f in self.findings.items()},
                "unavailability_s": self.unavailability}


def check(events: list[dict], linearizable: bool = False) -> Report:
    """Every check over one history. ``linearizable``: also the single-writer topics' strict checks."""
    report = Report()
    ops: dict[str, int] = defaultdict(int)
    for e in events:
        ops[f"{e.get('f')} {e.get('type')}"] += 1
    report.operations = dict(sorted(ops.items()))
    sends = _sends(events)
    finals = [e for e in events if e.get("f") == "final-read" and e.get("type") == "ok"]
    f = report.findings
    _lost_and_phantoms(sends, finals, events, f)
    _final_order(finals, sends, f)
    _fenced(events, sends, finals, f)
    _delivery(events, sends, f)
    if linearizable:
        _linearizable(events, sends, finals, f)
    report.unavailability = unavailability(events)
    return report


def _sends(events: list[dict]) -> dict[str, dict]:
    """value -> {"invoke": event, "outcome": "ok"|"fail"|"unknown"|None, "done": event}."""
    out: dict[str, dict] = {}
    for e in events:
        if e.get("f") != "send":
            continue
        if e["type"] == "invoke":
            out[e["value"]] = {"invoke": e, "outcome": None, "done": None}
        elif e["value"] in out:
            out[e["value"]].update(outcome=e["type"], done=e)
    return out


def _lost_and_phantoms(sends: dict, finals: list[dict], events: list[dict], f: dict[str, Finding]) -> None:
    read_values = {e["value"] for e in finals}
    for value, s in sends.items():
        if s["outcome"] == "ok" and value not in read_values:
            f["lost"].add({"value": value, "id": s["done"].get("id"), "topic": s["invoke"]["topic"]})
        elif s["outcome"] == "fail" and value in read_values:
            f["failed_but_read"].add({"value": value, "error": s["done"].get("error")})
        elif s["outcome"] in ("unknown", None):
            f["unknown_stored" if value in read_values else "unknown_absent"].add(value)
    seen_phantoms: set[str] = set()
    for e in events:
        if e.get("f") in ("final-read", "receive", "read") and e.get("type") == "ok" and e["value"] not in sends:
            if e["value"] not in seen_phantoms:
                seen_phantoms.add(e["value"])
                f["phantom"].add({"value": e["value"], "f": e["f"], "id": e.get("id")})


def _order_key(sends: dict, value: str):
    """A producer that batches by key promises order per key only (its key batches go out in any order)."""
    return sends.get(value, {}).get("invoke", {}).get("order_key")


def _final_order(finals: list[dict], sends: dict, f: dict[str, Finding]) -> None:
    """Per partition and producer: seq rises in read order; a value read twice is a duplicate."""
    last: dict[tuple, tuple[int, str]] = {}
    seen: set[tuple] = set()
    for e in finals:
        where = _partition(e)
        if (where, e["value"]) in seen:
            dedup = sends.get(e["value"], {}).get("invoke", {}).get("dedup", False)
            f["dedup_duplicates" if dedup else "duplicates"].add({"value": e["value"], "partition": where})
            continue
        seen.add((where, e["value"]))
        try:
            producer, seq = seq_of(e["value"])
        except ValueError:
            continue  # a phantom, reported as such
        stream = (where, producer, _order_key(sends, e["value"]))
        prev = last.get(stream)
        if prev is not None and seq < prev[0]:
            f["order"].add({"partition": where, "read": e["value"], "after": prev[1]})
        if prev is None or seq > prev[0]:
            last[stream] = (seq, e["value"])


def _fenced(events: list[dict], sends: dict, finals: list[dict], f: dict[str, Finding]) -> None:
    """A send acknowledged into ledger L although, before it was even invoked, the same partition had
    acknowledged a send into a newer ledger: only a writer that lost ownership (whose ledger was fenced) could
    have stored it. Counted; readable ones are violations."""
    newest: dict[tuple, int] = {}  # partition -> newest ledger acknowledged so far (in real time)
    newest_at_invoke: dict[str, dict] = {}
    readable = {x["value"] for x in finals}
    for e in events:
        if e.get("f") != "send":
            continue
        if e["type"] == "invoke":
            newest_at_invoke[e["value"]] = dict(newest)
        elif e["type"] == "ok" and e.get("id") and e["id"][0] >= 0:  # -1: a duplicate the broker's dedup dropped
            where = _partition(e)
            ledger = e["id"][0]
            before = newest_at_invoke.get(e["value"], {}).get(where, -1)
            if ledger < before:
                f["fenced_writes"].add({"value": e["value"], "ledger": ledger, "newer_ledger": before})
                if e["value"] in readable:
                    f["fenced_read"].add({"value": e["value"], "ledger": ledger, "newer_ledger": before})
            newest[where] = max(newest.get(where, -1), ledger)


def _delivery(events: list[dict], sends: dict, f: dict[str, Finding]) -> None:
    """Consumers: acknowledged-then-redelivered; Exclusive/Failover per-producer order and Key_Shared per-key
    order (a value never delivered before that arrives after a later one of its stream skipped ahead); every
    acknowledged send delivered to every subscription whose consumers drained to the end."""
    acked: set[tuple] = set()
    received: dict[str, set[str]] = defaultdict(set)
    high: dict[tuple, tuple[int, str]] = {}
    for e in events:
        kind = e.get("f")
        if kind not in ("receive", "ack") or e.get("type") != "ok":
            continue
        sub = (e["topic"], e["subscription"])
        if kind == "ack":
            acked.add((sub, e["value"]))
            continue
        first_time = e["value"] not in received[sub]
        if not first_time and (sub, e["value"]) in acked:
            f["acked_redelivered"].add({"subscription": sub[1], "value": e["value"]})
        received[sub].add(e["value"])
        try:
            producer, seq = seq_of(e["value"])
        except ValueError:
            continue
        sub_type = e.get("sub_type")
        if sub_type in ORDERED_TYPES:
            stream, finding = (sub, _partition(e)[1], producer, _order_key(sends, e["value"])), "ordered_delivery"
        elif sub_type == "Key_Shared":
            stream, finding = (sub, e.get("key"), producer), "key_order"
        else:
            continue
        prev = high.get(stream)
        if first_time and prev is not None and seq < prev[0]:
            f[finding].add({"subscription": sub[1], "type": sub_type, "got": e["value"], "after": prev[1]})
        if prev is None or seq > prev[0]:
            high[stream] = (seq, e["value"])
    drained = {(e["topic"], e["subscription"]) for e in events if e.get("f") == "drained" and e.get("type") == "ok"}
    for sub in sorted(drained):
        for value, s in sends.items():
            if s["outcome"] == "ok" and s["invoke"]["topic"] == sub[0] and value not in received[sub]:
                f["subscription_missing"].add({"subscription": sub[1], "value": value})


def _linearizable(events: list[dict], sends: dict, finals: list[dict], f: dict[str, Finding]) -> None:
    """Topics marked ``linearizable`` (one partition, one writer): the acknowledged values in acknowledgement
    order equal the final read order with unacknowledged values left out; acknowledged ids rise; no reader
    ever receives an id at or below one it already received."""
    topics = {e["topic"] for e in events if e.get("f") == "send" and e.get("linearizable")}
    for topic in sorted(topics):
        acks = [e for e in events if e.get("f") == "send" and e.get("type") == "ok" and e["topic"] == topic]
        acked_values = [e["value"] for e in acks]
        acked = set(acked_values)
        read, seen = [], set()
        for e in finals:
            if e["topic"] == topic and e["value"] in acked and e["value"] not in seen:
                seen.add(e["value"])
                read.append(e["value"])
        if read != acked_values:
            at = next((i for i, (a, b) in enumerate(zip(acked_values, read)) if a != b), min(len(read), len(acked_values)))
            f["linearizable"].add({"topic": topic, "what": "acknowledged order != read order", "index": at,
                                   "acked": acked_values[at:at + 3], "read": read[at:at + 3]})
        stored = [e for e in acks if e["id"][0] >= 0]
        for a, b in zip(stored, stored[1:]):
            if tuple(b["id"][:3]) <= tuple(a["id"][:3]):
                f["linearizable"].add({"topic": topic, "what": "acknowledged ids went backwards",
                                       "first": [a["value"], a["id"]], "then": [b["value"], b["id"]]})
        last_read: dict[str, tuple] = {}
        for e in events:
            if e.get("f") == "read" and e.get("type") == "ok" and e["topic"] == topic:
                here = tuple(e["id"][:3])
                prev = last_read.get(e["process"])
                if prev is not None and here <= prev[0]:
                    f["linearizable"].add({"topic": topic, "what": "a reader went backwards", "reader": e["process"],
                                           "got": [e["value"], e["id"]], "after": prev[1]})
                if prev is None or here > prev[0]:
                    last_read[e["process"]] = (here, [e["value"], e["id"]])


def unavailability(events: list[dict]) -> dict[str, dict]:
    """Per fault kind: the longest gap between two consecutive acknowledged sends of any one producer that
    overlaps the fault (from its injection to its heal), as p50/p90/max over that kind's injections."""
    acks: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("f") == "send" and e.get("type") == "ok":
            acks[e["process"]].append(e["t"])
    opened: dict[str, dict] = {}
    windows: list[tuple[str, float, float]] = []
    for e in events:
        if e.get("f") != "fault":
            continue
        if e["type"] == "invoke":
            opened[e["fault_id"]] = e
        elif e["fault_id"] in opened:
            start = opened.pop(e["fault_id"])
            windows.append((start["kind"], start["t"], e["t"]))
    gaps: dict[str, list[float]] = defaultdict(list)
    for kind, start, end in windows:
        worst = 0.0
        for times in acks.values():
            worst = max(worst, longest_gap(times, start, end))
        gaps[kind].append(worst)
    return {kind: {"faults": len(v), "p50": percentile(sorted(v), 50), "p90": percentile(sorted(v), 90),
                   "max": max(v)} for kind, v in sorted(gaps.items())}


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest interval between consecutive ``times`` that overlaps [start, end]; when nothing was
    acknowledged after the last time, the interval still open at ``end`` counts up to ``end``."""
    points = sorted(times)
    worst = 0.0
    for prev, t in zip(points, points[1:]):
        if t >= start and prev <= end:
            worst = max(worst, t - prev)
    if points and points[-1] < end:
        worst = max(worst, end - points[-1])
    return worst
