"""Helpers for the several-broker tests: HTTP lookup, a client of either kind, steady production with a record."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pulsar

from broker.ownership.bundles import NamespaceBundles, bundle_name
from broker.topics.names import parse_topic
from storage.testing.waiting import wait_until


def lookup(broker, topic: str, authoritative: bool = False) -> str:
    """The owner's service URL, through ``broker``'s HTTP lookup (which assigns an unowned bundle, following the
    redirect to the broker placement chooses; ``authoritative`` makes ``broker`` itself take it)."""
    domain, name = topic.split("://", 1)
    query = "?authoritative=true" if authoritative else ""
    with urllib.request.urlopen(f"{broker.web_url}/lookup/v2/topic/{domain}/{name}{query}", timeout=30) as resp:
        return json.loads(resp.read())["brokerUrl"]


def owner_of(brokers, topic: str):
    url = lookup(brokers[0], topic)
    return next(b for b in brokers if b.service_url == url)


def take(broker, topic: str, brokers):
    """Look ``topic`` up on ``broker`` authoritatively, so that broker takes its unowned bundle; the owner."""
    url = lookup(broker, topic, authoritative=True)
    return next(b for b in brokers if b.service_url == url)


def one_in_each_of_two_bundles(names) -> list[str]:
    """The first two of ``names`` (topics of one namespace with the default 4 bundles) in different bundles."""
    bundles = NamespaceBundles.equal(4)
    first = names[0]
    second = next(n for n in names if bundles.bundle_of(parse_topic(n)) != bundles.bundle_of(parse_topic(first)))
    return [first, second]


def client(url: str, api=pulsar):
    if api is pulsar:
        return pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    return api.Client(url, operation_timeout_seconds=30)


def topics_in(bundle, count: int, prefix: str, bundles: NamespaceBundles | None = None) -> list[str]:
    """``count`` topic names of public/default whose hash falls in ``bundle`` (of the default 4 unless given)."""
    bundles = bundles or NamespaceBundles.equal(4)
    out = []
    for i in range(100_000):
        name = f"persistent://public/default/{prefix}-{i}"
        if bundles.bundle_of(parse_topic(name)) == bundle:
            out.append(name)
            if len(out) == count:
                return out
    raise AssertionError(f"not {count} topics in {bundle_name(bundle)}")


class Production:
    """Sends 0, 1, 2, ... on each producer from its own thread, one send at a time. A failed send is recorded as
    an error the application saw and retried with the same value (it may have been stored). Each producer's
    receipts are kept as (monotonic time of the ack, ledger id): a new owner writes a new ledger."""

    def __init__(self, api, producers: list):
        self.api = api
        self.acked: list[list[int]] = [[] for _ in producers]
        self.receipts: list[list[tuple[float, int]]] = [[] for _ in producers]
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=args)
                         for args in zip(producers, self.acked, self.receipts)]
        for t in self._threads:
            t.start()

    def _run(self, producer, acked: list[int], receipts: list[tuple[float, int]]) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                message_id = producer.send(f"{i}".encode())
            except self.api.PulsarException as exc:
                self.errors.append(exc)
                continue
            receipts.append((time.monotonic(), message_id.ledger_id()))
            acked.append(i)
            i += 1

    def total(self) -> int:
        return sum(len(a) for a in self.acked)

    def wait_for_more(self, count: int, timeout_s: float, what: str) -> None:
        """Every producer gets ``count`` more acknowledgements (or some error surfaces) before the deadline."""
        marks = [len(a) for a in self.acked]
        wait_until(lambda: self.errors or all(len(a) >= m + count for a, m in zip(self.acked, marks)), timeout_s, what)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
