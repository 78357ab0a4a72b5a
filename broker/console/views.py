"""What the console's REST endpoints answer, as pure functions of what was read (no I/O, clock injected).

Each function turns stored state (ledger metadata, a metadata node's bytes, bookie registrations and info)
into the JSON the console draws, so the rules it shows -- the zone rule per write set, the health verdicts
and their reasons, how a node's bytes are decoded -- are tested from tables (tests/console/test_views.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

import msgpack

from storage.client.api import write_sets
from storage.ledger_metadata import LedgerMetadata

# Bounds on what a client may ask for in one request.
MAX_PAGE = 500
DEFAULT_PAGE = 50
MAX_FILTER_CHARS = 200
MAX_NODE_BYTES_SHOWN = 64 * 1024  # a node's decoded value past this is cut (ZooKeeper's own limit is 1 MiB)
MAX_ENTRY_BYTES_SHOWN = 4096  # first bytes of an entry shown as hex and UTF-8, like `readledger` does
MAX_METADATA_PATH = 1024

# Values never shown by the metadata browser: ledger passwords (BookKeeper keeps them in ledger metadata), and
# anything that looks like a credential.
SECRET_KEYS = frozenset({"password", "passwd", "secret", "token", "authParams", "auth_params", "privateKey"})
REDACTED = "<redacted>"

# Health thresholds (amber / red): disk used, and the recent journal fsync p99.
DISK_AMBER, DISK_RED = 0.85, 0.95
FSYNC_P99_AMBER_MS = 100.0


class ConsoleRequestError(ValueError):
    """A console query parameter is out of its bounds (answered 400)."""


# ---- paging ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    offset: int = 0
    limit: int = DEFAULT_PAGE
    filter: str = ""


def parse_page(query: Mapping[str, str]) -> Page:
    """offset (>= 0), limit (1..MAX_PAGE) and filter (a substring, at most MAX_FILTER_CHARS) from a query string."""
    def number(name: str, default: int, low: int, high: int) -> int:
        raw = query.get(name)
        if raw is None or raw == "":
            return default
        if not raw.isdigit() or len(raw) > 12 or not low <= int(raw) <= high:
            raise ConsoleRequestError(f"{name} must be an integer in {low}..{high}, got {raw[:40]!r}")
        return int(raw)

    text = query.get("filter", "")
    if len(text) > MAX_FILTER_CHARS:
        raise ConsoleRequestError(f"filter must be at most {MAX_FILTER_CHARS} characters")
    return Page(number("offset", 0, 0, 10**12), number("limit", DEFAULT_PAGE, 1, MAX_PAGE), text)


def page_of(names: list[str], page: Page) -> tuple[list[str], int]:
    """(the page's names, how many matched the filter) from a sorted list."""
    matched = [n for n in names if page.filter in n] if page.filter else names
    return matched[page.offset : page.offset + page.limit], len(matched)


# ---- metadata nodes ---------------------------------------------------------------------------


def redact(value):
    """A copy of a decoded value with every SECRET_KEYS field replaced by REDACTED, at any depth."""
    if isinstance(value, dict):
        return {k: (REDACTED if str(k) in SECRET_KEYS else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _jsonable(value):
    """msgpack can hold bytes and non-string keys; JSON cannot."""
    if isinstance(value, dict):
        return {str(k if not isinstance(k, bytes) else k.decode("utf-8", "replace")): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return {"hex": value[:256].hex()}
    return value


def decode_node(data: bytes) -> dict:
    """How a node's bytes read: {"encoding": json|msgpack|utf-8|binary|empty, "value", "size", "truncated"}.

    JSON is tried first (most Magnetar nodes), then msgpack (cursor snapshots), where a whole-buffer decode to
    a map or list counts (a short binary string often decodes as some msgpack scalar by chance); then printable UTF-8
    text; else the first bytes in hex. Secrets are redacted in every structured form.
    """
    size = len(data)
    if not data:
        return {"encoding": "empty", "value": None, "size": 0, "truncated": False}
    try:
        return {"encoding": "json", "value": redact(json.loads(data)), "size": size, "truncated": False}
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
        if isinstance(value, (dict, list)):
            return {"encoding": "msgpack", "value": redact(_jsonable(value)), "size": size, "truncated": False}
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, TypeError):
        pass
    shown = data[:MAX_NODE_BYTES_SHOWN]
    try:
        text = shown.decode("utf-8")
        if all(c.isprintable() or c in "\t\n\r" for c in text):  # else bytes that happen to decode
            return {"encoding": "utf-8", "value": text, "size": size, "truncated": size > len(shown)}
    except UnicodeDecodeError:
        pass
    return {"encoding": "binary", "value": shown[:4096].hex(), "size": size, "truncated": size > 4096}


def check_metadata_path(path: str) -> str:
    """A metadata path as the browser may ask for it: absolute, no empty or dot segments, bounded."""
    if not path.startswith("/") or len(path) > MAX_METADATA_PATH:
        raise ConsoleRequestError(f"path must start with '/' and be at most {MAX_METADATA_PATH} characters")
    if path == "/":
        return path
    parts = path.rstrip("/").split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise ConsoleRequestError(f"path {path[:80]!r} has an empty, '.' or '..' segment")
    return "/" + "/".join(parts)


# ---- ledgers -------------------------------------------------------------------------------------


def zone_rule_need(write_quorum_size: int, zones_in_cluster: int, min_zones: int = 2) -> int:
    """How many zones each write set must span (invariant 7): min_zones, but never more than Qw or than the
    cluster has zones (one zone: the rule cannot apply, and 1 is met by any write set)."""
    return max(1, min(min_zones, write_quorum_size, zones_in_cluster))


def ledger_view(md: LedgerMetadata, zone_of: Mapping[str, str], zones_in_cluster: int, min_zones: int = 2) -> dict:
    """A ledger's metadata for the console: state, quorums, and per fragment its ensemble (bookie ids and
    zones) and each write set's zones with whether it meets the zone rule. A bookie no longer registered has
    zone None and counts for no zone, so a write set that leans on it may fail the check."""
    need = zone_rule_need(md.write_quorum_size, zones_in_cluster, min_zones)
    fragments = []
    for i, (first, ensemble) in enumerate(md.ensembles):
        last = md.ensembles[i + 1][0] - 1 if i + 1 < len(md.ensembles) else md.last_entry_id
        sets = []
        for positions in write_sets(len(ensemble), md.write_quorum_size):
            bookies = [ensemble[p] for p in positions]
            zones = sorted({zone_of[b] for b in bookies if zone_of.get(b)})
            sets.append({"bookies": bookies, "zones": zones, "meetsZoneRule": len(zones) >= need})
        fragments.append({
            "firstEntryId": first, "lastEntryId": last,
            "ensemble": [{"bookieId": b, "zone": zone_of.get(b)} for b in ensemble],
            "writeSets": sets, "meetsZoneRule": all(s["meetsZoneRule"] for s in sets),
        })
    return {
        "ledgerId": md.ledger_id, "state": md.state.value, "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum_size, "ackQuorumSize": md.ack_quorum_size,
        "lastEntryId": md.last_entry_id, "length": md.length, "digestType": md.digest_type,
        "ctime": md.ctime_ms, "customMetadata": redact(_jsonable(dict(md.custom))),
        "zonesNeededPerWriteSet": need, "fragments": fragments,
        "meetsZoneRule": all(f["meetsZoneRule"] for f in fragments),
    }


def entry_view(entry_id: int, payload: bytes) -> dict:
    """An entry as `readledger` prints it: the first MAX_ENTRY_BYTES_SHOWN bytes in hex and as UTF-8, with
    undecodable bytes replaced (a Pulsar entry's binary header precedes the message text), and whether those
    bytes are valid UTF-8 as they stand (a character cut at the end of the shown bytes is forgiven)."""
    shown = bytes(payload[:MAX_ENTRY_BYTES_SHOWN])
    truncated = len(shown) < len(payload)
    try:
        shown.decode("utf-8")
        valid = True
    except UnicodeDecodeError as exc:
        valid = truncated and exc.start >= len(shown) - 3
    return {"entryId": entry_id, "size": len(payload), "hex": shown.hex(),
            "utf8": shown.decode("utf-8", errors="replace"), "utf8Valid": valid, "truncated": truncated}


def parse_entry_selector(raw: str) -> str | int:
    """'first', 'last' or an entry id (0..2^63-1)."""
    if raw in ("first", "last"):
        return raw
    if raw.isdigit() and len(raw) <= 19 and int(raw) < 2**63:
        return int(raw)
    raise ConsoleRequestError(f"entry must be 'first', 'last' or an entry id, got {raw[:40]!r}")


def parse_ledger_id(raw: str) -> int:
    if raw.isdigit() and len(raw) <= 19 and int(raw) < 2**63:
        return int(raw)
    raise ConsoleRequestError(f"ledger id must be an integer in 0..2^63-1, got {raw[:40]!r}")


# ---- bookies and health ------------------------------------------------------------------------------


def bookie_rows(registered: Iterable[dict], cookies: Iterable[str], infos: Mapping[str, dict | str]) -> list[dict]:
    """One row per bookie known to the cluster. ``registered``: dicts with bookieId, state (writable|readonly),
    address, httpAddress, zone, upgradeDomain, networkLocation; ``cookies``: every bookie id with a cookie (a
    bookie with a cookie and no registration is down); ``infos``: bookie id -> its /api/v1/bookie/info, or the
    reason it could not be read."""
    rows = []
    seen = set()
    for r in registered:
        seen.add(r["bookieId"])
        info = infos.get(r["bookieId"])
        row = {**r, "infoError": info if isinstance(info, str) else None}
        if isinstance(info, dict):
            total, free = info.get("disk_total_bytes"), info.get("disk_free_bytes")
            row.update({
                "diskUsage": info.get("disk_usage_fraction"),
                "diskTotalBytes": total, "diskFreeBytes": free,
                "journalFsyncLatency": info.get("journal_fsync_latency"),
                "stateReason": info.get("state_reason") or "",
                "ledgers": info.get("ledgers"),
            })
        rows.append(row)
    for bookie_id in sorted(set(cookies) - seen):
        rows.append({"bookieId": bookie_id, "state": "down", "zone": None, "upgradeDomain": None,
                     "networkLocation": None, "address": None, "httpAddress": None,
                     "infoError": "not registered: the bookie is down (its cookie remains)"})
    return sorted(rows, key=lambda r: (r.get("zone") or "~", r.get("upgradeDomain") or "", r["bookieId"]))


def health_findings(bookies: list[dict], brokers: list[dict], leader: str | None, ensemble_size: int,
                    under_replicated: int = 0) -> list[dict]:
    """Red and amber states with the reason in words: [{"level": "red"|"amber", "subject", "reason"}]."""
    out: list[dict] = []

    def add(level, subject, reason):
        out.append({"level": level, "subject": subject, "reason": reason})

    writable = [b for b in bookies if b["state"] == "writable"]
    zones = {b["zone"] for b in writable if b.get("zone")}
    if len(writable) < ensemble_size:
        add("red", "bookies", f"{len(writable)} writable bookie{'s' if len(writable) != 1 else ''}, but new "
            f"ledgers need an ensemble of {ensemble_size}: topics cannot roll over to a new ledger")
    if len(zones) < 2 and writable:
        add("amber", "bookies", f"writable bookies are in {len(zones)} zone: write sets cannot span two zones")
    for b in bookies:
        who = f"bookie {b['bookieId']}"
        if b["state"] == "down":
            add("amber", who, "down: registered no more (its cookie remains)")
            continue
        if b["state"] == "readonly":
            add("amber", who, f"read-only{': ' + b['stateReason'] if b.get('stateReason') else ''}")
        if b.get("infoError"):
            add("amber", who, f"its HTTP info could not be read: {b['infoError']}")
        usage = b.get("diskUsage")
        if usage is not None and usage >= DISK_AMBER:
            add("red" if usage >= DISK_RED else "amber", who, f"disk {usage:.0%} full")
        fsync = b.get("journalFsyncLatency") or {}
        if fsync.get("p99_ms") is not None and fsync["p99_ms"] >= FSYNC_P99_AMBER_MS:
            add("amber", who, f"journal fsync p99 {fsync['p99_ms']:.0f} ms over the last {fsync['count']} syncs")
    if under_replicated:
        add("amber", "ledgers", f"{under_replicated} ledger{'s are' if under_replicated != 1 else ' is'} "
            "under-replicated: autorecovery copies their fragments to other bookies")
    if not brokers:
        add("red", "brokers", "no broker is registered")
    if brokers and leader is None:
        add("amber", "brokers", "no load-balancer leader is elected: no load shedding")
    return out


def health_level(findings: list[dict]) -> str:
    levels = {f["level"] for f in findings}
    return "red" if "red" in levels else "amber" if "amber" in levels else "green"
