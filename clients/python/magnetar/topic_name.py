"""Topic and namespace names, as Pulsar spells them: the one parser, shared by the client, the broker and Spark.

A topic is ``persistent://<tenant>/<namespace>/<local-name>`` (or
``non-persistent://...``, a topic the broker keeps in memory only). Shorter forms
expand the way Pulsar's clients and admin tools do: ``my-topic`` means
``persistent://public/default/my-topic`` and ``t/ns/my-topic`` means
``persistent://t/ns/my-topic``. A partition of a partitioned topic is the
internal topic ``<name>-partition-<i>``. The managed ledger behind a topic is
named ``<tenant>/<namespace>/persistent/<url-encoded local name>``, the path
Pulsar operators know under ``/managed-ledgers``.

Bad names raise ``ValueError`` with the reason and the expected form: this
module is pure and has no exception class of its own, so each side keeps its
own error by translating at its boundary (the broker's InvalidTopicNameError
in broker/topics/names.py; the Spark connector's option errors).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
MAX_TOPIC_NAME_LENGTH = 1024
DOMAINS = ("persistent", "non-persistent")  # non-persistent topics live in the broker's memory only
MAX_PARTITION_INDEX = 2**31 - 1  # a partition index travels as an int32 (MessageIdData.partition)
_SEGMENT = re.compile(r"^[-=:.\w]+$")
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")


def check_segment(kind: str, value: str) -> str:
    """A tenant, namespace or cluster name: letters, digits and ``-=:._``. Raises ValueError."""
    if not value or not _SEGMENT.match(value):
        raise ValueError(f"invalid {kind} name {value!r}: use letters, digits and -=:._")
    return value


def split_topic(name: str) -> tuple[str, int]:
    """``<base>-partition-<i>`` -> (``<base>``, i); any other name -> (name, -1), as Pulsar numbers a topic that
    is not a partition. Works on any spelling (full or short), without validating it."""
    m = _PARTITION.match(name)
    if m is None:
        return name, -1
    digits = m.group("index").lstrip("0") or "0"
    # Pulsar parses the index as a Java int and treats a name whose index does not fit as no partition.
    if len(digits) > len(str(MAX_PARTITION_INDEX)) or int(digits) > MAX_PARTITION_INDEX:
        return name, -1
    return m.group("base"), int(digits)


@dataclass(frozen=True)
class NamespaceName:
    tenant: str
    namespace: str

    @classmethod
    def parse(cls, text: str) -> "NamespaceName":
        """``<tenant>/<namespace>``. Raises ValueError."""
        parts = text.split("/")
        if len(parts) != 2:
            raise ValueError(f"invalid namespace {text!r}: expected <tenant>/<namespace>")
        return cls(check_segment("tenant", parts[0]), check_segment("namespace", parts[1]))

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True)
class TopicName:
    tenant: str
    namespace: str
    local_name: str  # includes any "-partition-<i>" suffix
    domain: str = "persistent"

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def partition_index(self) -> int:
        """The partition number of an internal partition topic, else -1."""
        return split_topic(self.local_name)[1]

    @property
    def partitioned_name(self) -> "TopicName":
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        base, index = split_topic(self.local_name)
        return TopicName(self.tenant, self.namespace, base, self.domain) if index >= 0 else self

    def partition(self, index: int) -> "TopicName":
        return TopicName(self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}", self.domain)

    @property
    def managed_ledger_name(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.domain}/{encode_local_name(self.local_name)}"

    @classmethod
    def from_managed_ledger_name(cls, name: str) -> "TopicName":
        tenant, namespace, domain, encoded = name.split("/", 3)
        return cls(tenant, namespace, urllib.parse.unquote(encoded), domain)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


def encode_local_name(local_name: str) -> str:
    return urllib.parse.quote(local_name, safe="")


def parse_topic(text: str) -> TopicName:
    """Parse and validate a topic name; short forms expand to public/default. Raises ValueError."""
    if not isinstance(text, str) or not text:
        raise ValueError("topic name is empty")
    if len(text) > MAX_TOPIC_NAME_LENGTH:
        raise ValueError(f"topic name is {len(text)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if "://" in text:
        domain, rest = text.split("://", 1)
        if domain not in DOMAINS:
            raise ValueError(f"invalid topic {text!r}: unknown domain {domain!r}, expected persistent:// "
                             f"or non-persistent://")
        parts = rest.split("/")
        if len(parts) != 3:
            raise ValueError(f"invalid topic {text!r}: expected {domain}://<tenant>/<namespace>/<topic>")
    else:
        domain = "persistent"
        parts = text.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]]
        elif len(parts) != 3:
            raise ValueError(
                f"invalid topic {text!r}: use <topic>, <tenant>/<namespace>/<topic> or persistent://<tenant>/<namespace>/<topic>"
            )
    tenant, namespace, local = parts
    check_segment("tenant", tenant)
    check_segment("namespace", namespace)
    if not local or local.strip() != local:
        raise ValueError(f"invalid topic {text!r}: the local name is empty or has surrounding spaces")
    if any(ord(c) < 32 for c in local):
        raise ValueError(f"invalid topic {text!r}: control characters are not allowed")
    return TopicName(tenant, namespace, local, domain)
