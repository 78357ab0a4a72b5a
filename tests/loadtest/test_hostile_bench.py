"""The `hostile` bench in --quick form: every attack runs against a real `broker standalone` in its default
deployment (supervisor, bookie processes, broker workers), the broker survives each, and the JSON says per attack what the issue asks (RSS peak, the good client's p99 beside its reference,
liveness, what the attacker was told)."""

from __future__ import annotations

import statistics

from tests.loadtest.test_bench_quick import run_suite

ATTACKS = ("ack_bomb", "poison_batch", "silent_connections", "producer_creates", "far_future_acks",
           "big_messages_unread")


def test_hostile_suite_quick_reports_every_attack(tmp_path):
    result, doc = run_suite("hostile", tmp_path, timeout_s=180)
    assert "hostile clients: the good client at 1,000 msg/s" in result.stdout
    r = doc["results"]
    assert r["broker_alive_at_end"] and r["fd_limit"]["enough"]
    reference = r["reference"]
    # a quiet window before each attack and one after the last; the reference is the median of their p99s
    assert reference["windows"] == len(ATTACKS) + 1 == len(reference["window_p99_ms"])
    assert reference["p99_ms"] == statistics.median(reference["window_p99_ms"]) and 0 < reference["p50_ms"]
    assert list(r["attacks"]) == list(ATTACKS)
    config = r["config"]
    # The default deployment: a supervisor, three bookies and at least one worker, every one of them watched
    assert config["deployment"] == "default" and config["processes"] >= 5, config
    for name, a in r["attacks"].items():
        assert a["stayed_up"] and a["alive"] and a["healthy"] and a["connect_ping_ms"] is not None, name
        assert "attacker_error" not in a["attacker"], (name, a["attacker"])
        assert 0 < a["rss_peak_mb"] < 1024, (name, a["rss_peak_mb"])  # the broker's memory stays bounded
        assert a["processes"] == config["processes"]  # the sum covers the whole tree
        assert 0 < a["rss_largest_process_peak_mb"] <= a["rss_peak_mb"], (name, a)
        good = a["good_client"]
        assert good["published"] > 0 and good["failed"] == 0, (name, good)  # the good client kept publishing
        assert a["p99_ratio"] == good["p99_ms"] / reference["p99_ms"]
        # each attack is charged with its aftermath: the quiet window after it
        after = reference["window_p99_ms"][ATTACKS.index(name) + 1]
        assert a["after_p99_ms"] == after and a["after_ratio"] == after / reference["p99_ms"]
        assert a["targets_met"]["p99_within_5x"] == (a["p99_ratio"] <= 5 and a["after_ratio"] <= 5)
        assert a["told"]
    for name in ("ack_bomb", "poison_batch", "far_future_acks"):
        # Floods of small frames are read only as fast as they are handled: the broker does not queue them
        # (before, an ACK flood grew it by ~110 MB/s, 260 MB within this 2 s window).
        a = r["attacks"][name]
        assert a["rss_peak_mb"] - a["rss_before_mb"] < 150, (name, a["rss_before_mb"], a["rss_peak_mb"])
    told = {name: a["attacker"] for name, a in r["attacks"].items()}
    # What each attacker was told, as the broker's answers show it
    assert "SEND_ERROR NotAllowedError" in told["poison_batch"]["replies"]
    assert "out of range" in told["poison_batch"]["messages"]["SEND_ERROR NotAllowedError"]
    assert told["ack_bomb"]["replies"].get("ACK_RESPONSE", 0) > 0  # the broker kept answering the bomber's ACKs
    silent = told["silent_connections"]
    assert silent["closed_by_broker"] == silent["opened"] > 0  # every one closed at the CONNECT deadline
    assert silent["closed_after_s_min"] >= r["config"]["connection_timeout_s"] * 0.9
    # Every create is answered with success, at the control budget's pace: the burst at once (1,000), the rest at
    # 200/s, so not all of them within the quick attack's 2 s. (On a box at load 18 the burst itself took longer
    # than the window: 894 answered; so the floor is half the burst.)
    creates = told["producer_creates"]["replies"]
    assert set(creates) == {"PRODUCER_SUCCESS"}, creates
    assert 500 <= creates["PRODUCER_SUCCESS"] <= r["config"]["producer_creates"], creates
    assert told["big_messages_unread"]["mib_sent"] > 5
