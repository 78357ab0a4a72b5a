"""One ``/metrics`` for the workers of one host: worker 0 merges its siblings' expositions into its own.

How this works. ``broker standalone`` (and ``broker start --workers N``) runs N brokers behind one advertised
address (broker/workers.py); Prometheus and the Grafana dashboard scrape that address, which is worker 0's.
The supervisor gives worker 0 the other workers' web URLs (``BrokerConfig.metrics_worker_urls``); its
``/metrics`` asks each of them for theirs, concurrently, and answers with one exposition in which:

* every series keeps its labels. Topic series are unique across workers (a topic is served only by its
  bundle's owner), namespace series (``pulsar_ml_*``) and broker-wide ones (connections, topics, the entry
  cache) are summed, as ``sum by (every label)`` would: the host's total, as Pulsar's one-broker standalone
  reports it. Should a topic briefly show on two workers during a hand-off, its two series are summed too,
  which keeps the exposition valid (Prometheus refuses a scrape with a duplicate series);
* a family that is a maximum (``MAX_FAMILIES``) takes the largest value;
* a family that describes one process and means nothing summed (``PER_WORKER_FAMILIES``: the stats window's
  samples and span) gets a ``worker`` label, the worker's index;
* ``magnetar_worker_up{worker="i"}`` says which workers answered. A worker that did not (restarting, or
  slower than ``WORKER_TIMEOUT_S``) is left out of this scrape rather than failing it: its topics are
  missing for one scrape, and the 0 says why.

The caller's ``Authorization`` header goes on to the siblings (needed with ``authenticate_metrics_endpoint``);
without one, this broker's own ``brokerClientAuthentication*`` credentials, as for other broker-to-broker calls.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Sequence

import aiohttp

from broker.errors import BrokerError
from broker.http.metrics import label_text, sample_value
from broker.ownership.non_persistent_listing import broker_client_headers

WORKER_TIMEOUT_S = 10.0
MAX_WORKER_ANSWER_BYTES = 256 * 1024 * 1024  # about 40,000 topics of 2 subscriptions (5.8 MiB per 1,000)
MAX_FAMILIES = frozenset({"pulsar_connection_write_buffer_max_bytes"})
PER_WORKER_FAMILIES = frozenset({"magnetar_stats_samples_total", "magnetar_stats_window_seconds"})
UP_FAMILY = "magnetar_worker_up"
TOPIC_FAMILY = "pulsar_storage_size"  # written for every loaded topic: its series name a worker's topics


class ExpositionError(BrokerError):
    """A worker's answer is not Prometheus text as the brokers write it."""


class Family:
    """One family of an exposition: its HELP and TYPE, and its sample lines as written."""

    __slots__ = ("doc", "kind", "samples")

    def __init__(self, doc: str = "", kind: str = "untyped", samples: str = ""):
        self.doc, self.kind, self.samples = doc, kind, samples

    @property
    def per_topic(self) -> bool:
        return 'topic="' in self.samples[:self.samples.find("\n")]


def parse_exposition(text: bytes) -> dict[str, Family]:
    """The families of Prometheus text as the brokers write it (``# HELP``, ``# TYPE``, then the family's samples),
    by name. Raises ExpositionError for a sample line outside a family."""
    families: dict[str, Family] = {}
    current: Family | None = None
    for block in text.decode(errors="replace").split("\n# "):
        head, _, rest = block.lstrip("# ").partition("\n")
        parts = head.split(" ", 2)
        if len(parts) >= 2 and parts[0] in ("HELP", "TYPE"):
            family = families.get(parts[1])
            if family is None:
                family = families[parts[1]] = Family()
            if parts[0] == "HELP":
                family.doc = parts[2] if len(parts) > 2 else ""
            else:
                family.kind = parts[2] if len(parts) > 2 else "untyped"
            current = family
        elif head.strip():
            raise ExpositionError(f"not a family header: {head[:200]!r}")
        if rest.strip():
            if current is None:
                raise ExpositionError(f"samples before any family: {rest[:200]!r}")
            current.samples += rest if rest.endswith("\n") else rest + "\n"
    return families


def merge_expositions(parts: Sequence[tuple[str, dict[str, Family] | None]]) -> bytes:
    """The expositions of several workers as one: ``parts`` is (worker label, its parsed text or None if it did not
    answer), worker 0 first. Raises ExpositionError for a sample line that is not one.

    Topics are served by one worker each, so a worker's per-topic families are copied as written -- most of a
    scrape, and the cheap part. Only when two workers report the same topic (a hand-off in progress) is every
    family merged series by series, so the answer never holds a duplicate series, which Prometheus refuses."""
    answered = [(worker, families) for worker, families in parts if families is not None]
    disjoint = _topics_disjoint([families for _, families in answered])
    names: dict[str, Family] = {}
    for _, families in answered:
        for name, family in families.items():
            names.setdefault(name, Family(family.doc, family.kind))
    out = []
    for name, merged in names.items():
        blocks = [(worker, families[name]) for worker, families in answered if name in families]
        if disjoint and name not in PER_WORKER_FAMILIES and any(f.per_topic for _, f in blocks):
            samples = "".join(f.samples for _, f in blocks)
        else:
            samples = "".join(f"{key} {sample_value(value)}\n" for key, value in _merge_series(name, blocks).items())
        if samples:
            out.append(f"# HELP {name} {merged.doc}\n# TYPE {name} {merged.kind}\n{samples}")
    up = "".join(f"{UP_FAMILY}{label_text(['worker'], [worker])} {1.0 if families is not None else 0.0}\n"
                 for worker, families in parts)
    out.append(f"# HELP {UP_FAMILY} 1 if this worker's metrics are in this scrape, 0 if it did not answer\n"
               f"# TYPE {UP_FAMILY} gauge\n{up}")
    return "".join(out).encode()


def _topics_disjoint(expositions: list[dict[str, Family]]) -> bool:
    """Whether no topic is in two workers' expositions. A worker with per-topic series but no TOPIC_FAMILY to tell
    its topics by counts as overlapping: the series-by-series merge is right in every case."""
    seen: set[str] = set()
    for families in expositions:
        family = families.get(TOPIC_FAMILY)
        if family is None:
            if any(f.per_topic for f in families.values()):
                return False
            continue
        topics = {line.rpartition(" ")[0] for line in family.samples.splitlines()}
        if seen & topics:
            return False
        seen |= topics
    return True


def _merge_series(name: str, blocks: list[tuple[str, Family]]) -> dict[str, float]:
    """One family's series over the workers: summed by labels, a maximum for MAX_FAMILIES, a ``worker`` label for
    PER_WORKER_FAMILIES."""
    series: dict[str, float] = {}
    for worker, family in blocks:
        for line in family.samples.splitlines():
            key, value = _sample(line)
            if name in PER_WORKER_FAMILIES:
                key = _with_label(key, "worker", worker)
            if key not in series:
                series[key] = value
            elif name in MAX_FAMILIES:
                series[key] = max(series[key], value)
            else:
                series[key] += value
    return series


def _sample(line: str) -> tuple[str, float]:
    # The value is the last field: label values may hold spaces, and the brokers write no timestamps.
    key, _, value = line.rpartition(" ")
    if not key or (("{" in key) != key.endswith("}")):
        raise ExpositionError(f"not a sample line: {line[:200]!r}")
    try:
        return key, float(value)
    except ValueError:
        raise ExpositionError(f"not a number in sample line: {line[:200]!r}") from None


def _with_label(key: str, label: str, value: str) -> str:
    """``key`` with one more label, first: ``name{a="b"}`` -> ``name{label="value",a="b"}``."""
    name, brace, rest = key.partition("{")
    extra = label_text([label], [value])
    return f"{name}{extra[:-1]},{rest}" if brace else f"{name}{extra}"


async def merged_metrics(own: bytes, worker_urls: Sequence[str], authorization: str | None, config) -> bytes:
    """This worker's exposition ``own`` merged with that of each worker at ``worker_urls`` (workers 1, 2, ...)."""
    headers = {"Authorization": authorization} if authorization else broker_client_headers(config)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WORKER_TIMEOUT_S)) as http:
        answers = await asyncio.gather(*(_scrape(http, url, headers, config) for url in worker_urls))
    return merge_expositions([("0", parse_exposition(own)), *((str(i), _parsed(text))
                                                             for i, text in enumerate(answers, start=1))])


def _parsed(text: bytes | None) -> dict[str, Family] | None:
    """A sibling's answer parsed; one that is not Prometheus text counts as no answer (its ``up`` is 0)."""
    if text is None:
        return None
    try:
        return parse_exposition(text)
    except ExpositionError:
        return None


async def _scrape(http: aiohttp.ClientSession, base_url: str, headers: dict, config) -> bytes | None:
    tls = {"ssl": ssl.create_default_context(cafile=config.tls_trust_certs_file_path)} \
        if base_url.startswith("https:") else {}
    try:
        async with http.get(f"{base_url}/metrics", headers=headers, allow_redirects=False, **tls) as resp:
            body = await resp.content.read(MAX_WORKER_ANSWER_BYTES + 1)
            if resp.status != 200 or len(body) > MAX_WORKER_ANSWER_BYTES:
                return None
            return body
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None
