"""Helpers for the compaction tests: trigger a run over REST and wait for its outcome, read a compacted view."""

from __future__ import annotations

from storage.testing.waiting import wait_until
from tests.official_client.support import admin_call


def admin_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def compaction_status(broker, topic: str) -> dict:
    status, body = admin_call(broker, "GET", admin_path(topic) + "/compaction")
    assert status == 200, body
    return body


def start_compaction(broker, topic: str) -> None:
    status, body = admin_call(broker, "PUT", admin_path(topic) + "/compaction")
    assert status == 204, body


def wait_compacted(broker, topic: str, timeout_s: float = 90) -> dict:
    done = wait_until(lambda: (lambda s: s if s["status"] != "RUNNING" else None)(compaction_status(broker, topic)),
                      timeout_s, f"compaction of {topic} to finish")
    assert done["status"] == "SUCCESS", done
    return done


def compact(broker, topic: str, timeout_s: float = 90) -> dict:
    """Run compaction to its end (the official client's conformance test does the same over REST)."""
    start_compaction(broker, topic)
    return wait_compacted(broker, topic, timeout_s)


def read_available(reader, timeout_ms: int = 10_000) -> list:
    """Everything the reader has available now (has_message_available decides, not a quiet period)."""
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=timeout_ms))
    return out


def as_table(messages) -> dict[str, bytes]:
    """Fold messages into key -> last value; an empty value deletes the key."""
    table: dict[str, bytes] = {}
    for m in messages:
        if m.data():
            table[m.partition_key()] = m.data()
        else:
            table.pop(m.partition_key(), None)
    return table
