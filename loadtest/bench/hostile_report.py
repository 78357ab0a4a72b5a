"""The Hostile clients section of docs/BENCHMARKS.md and its rows of the targets table (issue 18)."""

from __future__ import annotations

from loadtest.bench.markdown_cells import number as _n
from loadtest.bench.markdown_cells import reproduce as _reproduce
from loadtest.bench.markdown_cells import table as _table
from loadtest.bench.markdown_cells import verdict as _verdict

HOSTILE_SHORT = {"ack_bomb": "ACK bomb", "poison_batch": "poison batch count", "silent_connections": "silent connections",
                 "producer_creates": "producer creates", "far_future_acks": "far-future ACKs",
                 "big_messages_unread": "5 MiB producer, receipts unread"}


def hostile_targets(r: dict) -> list[list[str]]:
    """Issue 18's targets: the good client's p99 within 5x its quiet p99 under each attack, RSS < 1 GiB, always up."""
    attacks = {name: a for name, a in r.get("attacks", {}).items() if "good_client" in a}
    if not attacks:
        return []
    ref = r["reference"]["p99_ms"]
    rows = [[f"hostile: {HOSTILE_SHORT.get(name, name)}, good client's publish p99 vs its no-attack p99",
             f"{_n(a['p99_ratio'], 1)}x ({_n(a['good_client']['p99_ms'], 1)} vs {_n(ref, 1)} ms)"
             + (f"; after it {_n(a['after_ratio'], 1)}x" if a.get("after_ratio") is not None else ""), "<= 5x",
             _verdict(a["targets_met"]["p99_within_5x"])] for name, a in attacks.items()]
    worst = max(attacks.values(), key=lambda a: a["rss_peak_mb"])
    rows.append(["hostile: broker RSS peak over every attack", f"{_n(worst['rss_peak_mb'])} MB", "< 1 GiB",
                 _verdict(all(a["targets_met"]["rss_under_1_gib"] for a in attacks.values()))])
    rows.append(["hostile: the broker stays up through every attack",
                 f"{sum(a['stayed_up'] for a in attacks.values())} of {len(attacks)}", "all",
                 _verdict(all(a["stayed_up"] for a in attacks.values()))])
    return rows


HOSTILE_ATTACKS = {
    "ack_bomb": "ACK bomb: `ack_set` against `batch_size` 2^31-1, 1,000 ids per ACK, back to back",
    "poison_batch": "poison batch count: SEND with `num_messages` / `num_messages_in_batch` 2^31-1, back to back",
    "silent_connections": "connections that never send CONNECT",
    "producer_creates": "PRODUCER creates on one connection, pipelined",
    "far_future_acks": "ACKs of random far-future positions, 1,000 ids per ACK, back to back",
    "big_messages_unread": "5 MiB messages as fast as possible on a sibling topic, receipts never read",
}


def _deployment(c: dict) -> str:
    """How the hostile bench ran the standalone (results before the option say nothing: --single-process)."""
    if c.get("deployment") == "default":
        return f" (its default deployment: {c['processes']} processes, a worker per core)"
    return " --single-process"


def hostile_section(r: dict) -> list[str]:
    if "attacks" not in r:
        return []
    ref, c = r["reference"], r["config"]
    rows = [["none: the reference (median of the quiet windows' p99)", _n(ref.get("p99_ms"), 1), "1", "", "", "yes",
             "", ""]]
    for name, a in r["attacks"].items():
        if "good_client" not in a:
            rows.append([HOSTILE_ATTACKS.get(name, name), "", "", "", "", "", a.get("skipped", ""), ""])
            continue
        met = a["targets_met"]
        missed = [what for what, ok in (("up", met["stayed_up"]), ("RSS", met["rss_under_1_gib"]),
                                        ("p99", met["p99_within_5x"])) if not ok]
        ratio, after = a["p99_ratio"], a.get("after_ratio")
        rows.append([HOSTILE_ATTACKS.get(name, name), _n(a["good_client"].get("p99_ms"), 1),
                     f"{ratio:.1f}x" if ratio is not None else "", f"{after:.1f}x" if after is not None else "",
                     _n(a["rss_peak_mb"]),
                     "yes" if a["stayed_up"] else "**NO**", a["told"][:140].replace("|", "/"),
                     _verdict(not missed) if not missed else f"**{', '.join(missed)} not met**"])
    return ["## Hostile clients", "",
            f"A well-behaved official client publishes {c['rate_per_s']:,} msg/s of {c['message_bytes']} B (open loop) "
            f"to `broker standalone`{_deployment(c)} and consumes them, while each attack runs in turn "
            f"({c['attack_window_s']:g} s each, after a {c['quiet_window_s']:g} s quiet window; "
            f"{c['silent_connections']:,} silent connections, {c['producer_creates']:,} producer creates). "
            "The reference is the median of the good client's p99 publish latency over the quiet windows of the same "
            "run; every quiet window but the first follows an attack, so the next column charges each attack with "
            "its aftermath (the quiet window after it). "
            "Targets: the broker stays up, RSS (summed over its processes) < 1 GiB, the good client's p99 within 5x "
            "the reference during the attack and after it. "
            "What holds the floods back: docs/configuration.md (per-connection bounds and command budgets).", "",
            *_table(["attack", "good p99 (ms)", "ratio", "after it", "broker RSS peak (MB)", "up",
                     "the attacker was told",
                     "targets"], rows), _reproduce("hostile"), ""]
