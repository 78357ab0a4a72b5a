"""Arguments as pulsar-admin reads them: names, sizes (``10M``), relative times (``3h``), message ids (``L:E``).

The unit parsers are pure functions (tested from tables); the click types around them turn a bad value into
a usage error (exit 2) that names the flag, before anything is sent. Names are checked with the client's own
parser (magnetar.topic_name), so the CLI accepts exactly the short forms the clients do.
"""

from __future__ import annotations

import functools
import time
import urllib.parse

import click

from magnetar.topic_name import NamespaceName, TopicName, check_segment, parse_topic

SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
MAX_LONG = 2**63 - 1


def parse_size(text: str) -> int:
    """``4096``, ``100K``, ``10M``, ``16G``, ``2T`` (powers of 1024) or ``-1`` -> bytes. Raises ValueError."""
    text = text.strip()
    unit = SIZE_UNITS.get(text[-1:].lower(), 1)
    number = text[:-1] if unit != 1 else text
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"invalid size {text[:40]!r}; valid forms: 4096, 100K, 10M, 16G, 2T") from None
    if value < -1 or abs(value * unit) > MAX_LONG:
        raise ValueError(f"size {text[:40]!r} is out of range (-1 or 0..2^63-1 bytes)")
    return value * unit if value >= 0 else -1


def parse_relative_time_s(text: str) -> int:
    """``120`` (seconds), ``100m``, ``3h``, ``2d``, ``5w``, ``1y`` or ``-1`` -> seconds. Raises ValueError."""
    text = text.strip()
    unit = TIME_UNITS.get(text[-1:].lower()) if text[-1:].isalpha() else 1
    if unit is None:
        raise ValueError(f"invalid time unit in {text[:40]!r}; use s, m, h, d, w or y")
    number = text[:-1] if text[-1:].isalpha() else text
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"invalid time {text[:40]!r}; valid forms: 120, 100m, 3h, 2d, 5w") from None
    if value < -1 or value * unit > MAX_LONG // 1000:
        raise ValueError(f"time {text[:40]!r} is out of range")
    return value * unit if value >= 0 else -1


def parse_message_id(text: str) -> dict:
    """``ledgerId:entryId`` -> Pulsar's REST message id. Raises ValueError."""
    ledger, sep, entry = text.strip().partition(":")
    try:
        if not sep:
            raise ValueError
        ledger_id, entry_id = int(ledger), int(entry)
    except ValueError:
        raise ValueError(f"invalid message id {text[:60]!r}: must be in format ledgerId:entryId") from None
    if not (-1 <= ledger_id <= MAX_LONG and -1 <= entry_id <= MAX_LONG):
        raise ValueError(f"message id {text[:60]!r} is out of range")
    return {"ledgerId": ledger_id, "entryId": entry_id}


def timestamp_before(seconds: int, now_s: float | None = None) -> int:
    """Milliseconds since the epoch ``seconds`` ago (pulsar-admin's ``reset-cursor --time 1h``)."""
    return int(((time.time() if now_s is None else now_s) - seconds) * 1000)


class _Parsed(click.ParamType):
    def __init__(self, name: str, parse):
        self.name, self._parse = name, parse

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = _Parsed("size", parse_size)
RELATIVE_TIME = _Parsed("time", parse_relative_time_s)
MESSAGE_ID = _Parsed("ledgerId:entryId", parse_message_id)
NAMESPACE = _Parsed("tenant/namespace", NamespaceName.parse)
TOPIC = _Parsed("topic", parse_topic)
TENANT = _Parsed("tenant", lambda text: check_segment("tenant", text))
CLUSTER = _Parsed("cluster", lambda text: check_segment("cluster", text))


def ns_path(ns: NamespaceName) -> str:
    return f"{ns.tenant}/{ns.namespace}"


def topic_path(topic: TopicName) -> str:
    """``persistent/<tenant>/<ns>/<encoded local name>``: the part of a topic route after /admin/v2/."""
    return f"{topic.domain}/{topic.tenant}/{topic.namespace}/{urllib.parse.quote(topic.local_name, safe='')}"


def quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def pass_rest(command):
    """Call ``command(rest, ...)`` with the session's AdminClient (built on first use)."""

    @click.pass_obj
    @functools.wraps(command)
    def with_rest(session, *args, **kwargs):
        return command(session.rest, *args, **kwargs)

    return with_rest


def csv(text: str | None) -> list[str]:
    """pulsar-admin's comma-separated list flags (``--actions produce,consume``)."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]
