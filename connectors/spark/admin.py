"""The few admin REST calls the Spark driver plans with (Pulsar's paths and shapes)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import quote

from connectors.spark.offsets import EARLIEST, LedgerInfo, Offset
from connectors.spark.security import ClientSecurity


class AdminError(RuntimeError):
    """The admin API refused a request or could not be reached."""


class TopicMissing(AdminError):
    pass


class Admin:
    def __init__(self, url: str, timeout_s: float = 30, security: ClientSecurity | None = None):
        """``security`` (connectors/spark/security.py): the credentials and, for https, the CA to use."""
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self._headers = {"Accept": "application/json", **(security.http_headers() if security else {})}
        self._ssl = security.ssl_context() if security is not None and self.url.startswith("https:") else None

    def _get(self, path: str):
        request = urllib.request.Request(self.url + path, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            reason = _reason(exc)
            if exc.code == 404:
                raise TopicMissing(reason) from None
            raise AdminError(f"GET {self.url + path}: HTTP {exc.code}: {reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise AdminError(f"admin API {self.url} unreachable (option 'admin.url'): {exc}") from None

    @staticmethod
    def _path(topic: str) -> str:
        return "/admin/v2/" + quote(topic.replace("://", "/", 1))

    def partitions(self, topic: str) -> int:
        return int(self._get(self._path(topic) + "/partitions")["partitions"])

    def topics(self, namespace: str) -> list[str]:
        return self._get(f"/admin/v2/persistent/{quote(namespace)}")

    def partitioned_topics(self, namespace: str) -> list[str]:
        return self._get(f"/admin/v2/persistent/{quote(namespace)}/partitioned")

    def last_offset(self, topic: str) -> Offset:
        """The topic's last message; EARLIEST when it has none yet. Raises TopicMissing."""
        body = self._get(self._path(topic) + "/lastMessageId")
        if body["entryId"] < 0:
            return EARLIEST
        return Offset(body["ledgerId"], body["entryId"], body.get("batchIndex", -1))

    def schema(self, topic: str) -> dict:
        """The topic's latest schema (``type``, ``data``, ``version``...); TopicMissing when it has none."""
        return self._get("/admin/v2/schemas/" + quote(topic.split("://", 1)[-1]) + "/schema")

    def ledgers_and_cursor(self, topic: str, subscription: str) -> tuple[list[LedgerInfo], Offset | None]:
        stats = self._get(self._path(topic) + "/internalStats")
        ledgers = [LedgerInfo(l["ledgerId"], l["entries"]) for l in stats["ledgers"]]
        cursor = stats.get("cursors", {}).get(subscription)
        if cursor is None:
            return ledgers, None
        ledger, entry = (int(x) for x in cursor["markDeletePosition"].split(":"))
        return ledgers, Offset(ledger, entry)  # entry -1: nothing of that ledger acknowledged yet


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return json.loads(exc.read()).get("reason", exc.reason)
    except ValueError:
        return str(exc.reason)


def topic_partitions(admin: Admin, topic: str) -> list[str] | None:
    """The topic-partitions behind ``topic`` (itself when not partitioned), or None when it does not exist."""
    count = admin.partitions(topic)
    if count > 0:
        return [f"{topic}-partition-{i}" for i in range(count)]
    try:
        admin.last_offset(topic)
    except TopicMissing:
        return None
    return [topic]


def matching_partitions(admin: Admin, namespace: str, pattern: re.Pattern) -> list[str]:
    partitioned = [t for t in admin.partitioned_topics(namespace) if pattern.fullmatch(t)]
    plain = [t for t in admin.topics(namespace) if pattern.fullmatch(t) and "-partition-" not in t]
    out = list(plain)
    for topic in partitioned:
        out.extend(f"{topic}-partition-{i}" for i in range(admin.partitions(topic)))
    return sorted(out)
