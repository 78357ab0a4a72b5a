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

from broker.http.metrics import label_text, sample_value
from broker.ownership.non_persistent_listing import broker_client_headers

WORKER_TIMEOUT_S = 10.0
MAX_WORKER_ANSWER_BYTES = 256 * 1024 * 1024  # ~60,000 topics' worth of series on one worker
MAX_FAMILIES = frozenset({"pulsar_connection_write_buffer_max_bytes"})
PER_WORKER_FAMILIES = frozenset({"magnetar_stats_samples_total", "magnetar_stats_window_seconds"})
UP_FAMILY = "magnetar_worker_up"


class ExpositionError(ValueError):
    """A worker's answer is not Prometheus text as the brokers write it."""


Parsed = tuple[dict[str, list[str]], list[tuple[str, float]]]  # name -> [help, type]; (series key, value)


def parse_exposition(text: bytes) -> Parsed:
    """The families (help, type) and samples of Prometheus text as the brokers write it. Raises ExpositionError
    for a line that is neither a comment nor a sample."""
    docs: dict[str, list[str]] = {}
    samples: list[tuple[str, float]] = []
    for line in text.decode(errors="replace").splitlines():
        if line.startswith("#"):
            _comment(docs, line)
        elif line:
            samples.append(_sample(line))
    return docs, samples


def merge_expositions(parts: Sequence[tuple[str, Parsed | None]]) -> bytes:
    """The expositions of several workers as one: ``parts`` is (worker label, its parsed text or None if it did not
    answer), worker 0 first."""
    families: dict[str, list] = {}  # name -> [help, type, {series key: value}]
    for worker, parsed in parts:
        if parsed is None:
            continue
        docs, samples = parsed
        for name, (doc, kind) in docs.items():
            families.setdefault(name, [doc, kind, {}])
        for key, value in samples:
            name = key.split("{", 1)[0]
            family = families.setdefault(name, ["", "untyped", {}])
            if name in PER_WORKER_FAMILIES:
                key = _with_label(key, "worker", worker)
            series = family[2]
            if key not in series:
                series[key] = value
            elif name in MAX_FAMILIES:
                series[key] = max(series[key], value)
            else:
                series[key] += value
    families[UP_FAMILY] = ["1 if this worker's metrics are in this scrape, 0 if it did not answer", "gauge",
                           {UP_FAMILY + label_text(["worker"], [worker]): 0.0 if parsed is None else 1.0
                            for worker, parsed in parts}]
    out = []
    for name, (doc, kind, series) in families.items():
        if not series:
            continue
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        out.extend(f"{key} {sample_value(value)}\n" for key, value in series.items())
    return "".join(out).encode()


def _comment(docs: dict[str, list[str]], line: str) -> None:
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
        return  # any other comment carries nothing
    doc = docs.setdefault(parts[2], ["", "untyped"])
    doc[0 if parts[1] == "HELP" else 1] = parts[3] if len(parts) > 3 else ""


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


def _parsed(text: bytes | None) -> Parsed | None:
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
