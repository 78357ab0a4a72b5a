"""Prometheus text for the broker: Pulsar's metric names and labels, so Pulsar dashboards and alerts work unchanged.

Families (every one is listed with its unit in docs/metrics.md):

- per topic (``cluster``, ``namespace``, ``topic``): counts of producers,
  consumers and subscriptions; rates and throughputs in and out; storage and
  backlog sizes; entries written and read per second; the storage write
  latency and entry size buckets (``pulsar_storage_write_latency_le_*``,
  ``pulsar_entry_size_le_*``); cumulative ``pulsar_{in,out}_{messages,bytes}_total``;
- per subscription (plus ``subscription``): backlog, unacked and delayed
  messages, dispatch rate and throughput, redelivery rate;
- per namespace (``cluster``, ``namespace``): the managed-ledger family
  ``pulsar_ml_*`` (add and read rates, add latency and entry size buckets with
  Pulsar's ``quantile`` labels, backlog, stored size);
- per broker (``cluster``): the entry cache ``pulsar_ml_cache_*``, connections,
  loaded topics, and the stats window itself (``magnetar_stats_*``).

Every rate and every "during the last window" figure comes from the broker's
stats window (broker/stats_window.py), which a periodic task samples; a
scrape only reads it, so scrapers never skew each other. Gauges of state
(sizes, counts, backlog) are read at the scrape.
"""

from __future__ import annotations

import gc

from broker.stats_window import TOPIC_FIELDS, Delta
from broker.topics import lifecycle
from storage.managed_ledger.stats import ADD_LATENCY_BOUNDS_MS, ENTRY_SIZE_BOUNDS_BYTES

TOPIC = ["cluster", "namespace", "topic"]
SUBSCRIPTION = TOPIC + ["subscription"]
NAMESPACE = ["cluster", "namespace"]

_F = {name: i for i, name in enumerate(TOPIC_FIELDS)}
_LATENCY_AT = len(TOPIC_FIELDS)  # the add-latency snapshot: buckets..., sum, count
_SIZE_AT = _LATENCY_AT + len(ADD_LATENCY_BOUNDS_MS) + 3
_TOPIC_VECTOR_LEN = _SIZE_AT + len(ENTRY_SIZE_BOUNDS_BYTES) + 3


def le_suffix(bound: float) -> str:
    """Pulsar's suffix for a latency bound in ms: 0.5 -> ``0_5``, 1000 -> ``1000``."""
    return str(bound).replace(".", "_") if bound != int(bound) else str(int(bound))


def size_suffix(bound: int) -> str:
    """Pulsar's suffix for an entry-size bound: 128, 512, then ``1_kb`` ... ``100_kb``, ``1_mb``."""
    if bound >= 1024 * 1024 and bound % (1024 * 1024) == 0:
        return f"{bound // (1024 * 1024)}_mb"
    if bound >= 1024 and bound % 1024 == 0:
        return f"{bound // 1024}_kb"
    return str(bound)


def quantile_labels(bounds) -> list[str]:
    """Pulsar's ``quantile`` label of each bucket but the overflow one: ``0.0_0.5``, ``0.5_1.0``, ..."""
    lows = (0.0, *bounds[:-1])
    return [f"{float(lo)}_{float(hi)}" for lo, hi in zip(lows, bounds)]


_LATENCY_NAMES = [f"pulsar_storage_write_latency_le_{le_suffix(b)}" for b in ADD_LATENCY_BOUNDS_MS] \
    + ["pulsar_storage_write_latency_le_overflow"]
_SIZE_NAMES = [f"pulsar_entry_size_le_{size_suffix(b)}" for b in ENTRY_SIZE_BOUNDS_BYTES] \
    + ["pulsar_entry_size_le_overflow"]
_LATENCY_QUANTILES = quantile_labels(ADD_LATENCY_BOUNDS_MS)
_SIZE_QUANTILES = quantile_labels(ENTRY_SIZE_BOUNDS_BYTES)

_EMPTY = Delta(0.0, (0.0,) * _TOPIC_VECTOR_LEN)


class _Families:
    """The exposition text, family by family (Prometheus text format 0.0.4), written directly.

    prometheus_client's generic collector path spent ~80 % of a scrape re-validating and re-escaping the same
    three labels for each of a topic's ~60 series (1.2 s for 1,000 topics against 0.2 s here, all of it blocking
    the event loop; docs/metrics.md); here each label set is escaped once per scrape.
    """

    def __init__(self):
        self._by_name: dict[str, tuple[str, str, list[str]]] = {}  # name -> (help, type, sample lines)

    def add(self, name: str, doc: str, labels: str, value: float, kind: str = "gauge") -> None:
        """One sample; ``labels`` as ``label_text`` made it (once per label set, not per series)."""
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = (doc, kind, [])
        family[2].append(f"{name}{labels} {sample_value(value)}")

    def render(self) -> bytes:
        out = []
        for name, (doc, kind, lines) in self._by_name.items():
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
            out.append("\n".join(lines))
            out.append("\n")
        return "".join(out).encode()


def label_text(names: list[str], values: list[str]) -> str:
    """``{name="value",...}`` with the values escaped as the text format wants (subscription names are the client's)."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(names, values)) + "}" if names else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample_value(value: float) -> str:
    """A sample's value as the text format writes it (NaN, +Inf, -Inf, else repr of the float)."""
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def collect(service) -> _Families:
    cluster = service.config.cluster_name
    window = service.topic_stats
    g = _Families()
    namespaces: dict[str, _NamespaceTotals] = {}
    cache = _NamespaceTotals()
    counted = []
    for name, topic in list(service.topics.items()):
        namespace = str(topic.name.namespace_name)
        values = [cluster, namespace, name]
        delta = window.topics.delta(name) or _EMPTY
        if len(delta.values) != _TOPIC_VECTOR_LEN:
            delta = _EMPTY
        subs = list(topic.subscriptions.items())
        _topic_gauges(g, topic, values, delta, subs)
        for sub_name, sub in subs:
            _subscription_gauges(g, sub, values + [sub_name], window.subscriptions.delta((name, sub_name)))
        counted.append((label_text(TOPIC, values), topic))
        totals = namespaces.setdefault(namespace, _NamespaceTotals())
        totals.add(topic, delta, subs)
        cache.add(topic, delta, subs)
    for metric, doc, attribute in (("pulsar_in_messages_total", "messages published", "msg_in"),
                                   ("pulsar_out_messages_total", "messages dispatched", "msg_out"),
                                   ("pulsar_in_bytes_total", "bytes published", "bytes_in"),
                                   ("pulsar_out_bytes_total", "bytes dispatched", "bytes_out")):
        for lt, topic in counted:
            g.add(metric, doc, lt, getattr(topic, attribute), kind="counter")
    for namespace, totals in sorted(namespaces.items()):
        totals.emit_managed_ledger(g, [cluster, namespace])
    cache.emit_cache(g, [cluster], len(service.topics))
    g.add("pulsar_active_connections", "client connections", "", len(service.connections))
    buffered = [conn.transport.get_write_buffer_size() for conn in list(service.connections)
                if conn.transport is not None and not conn.closed]
    g.add("pulsar_connection_write_buffer_bytes", "reply bytes not yet taken by the clients", "", sum(buffered))
    g.add("pulsar_connection_write_buffer_max_bytes", "the most reply bytes waiting for any one client", "",
          max(buffered, default=0))
    g.add("pulsar_topics_count", "topics loaded in this broker", "", len(service.topics))
    g.add("magnetar_bookie_client_bulk_add_paced_seconds_total", "time the adds of 256 KiB and up waited for their "
          "pace while small adds flowed (storage/client/pacing.py)", "", service.client.bulk_add_paced_s, kind="counter")
    for generation, stats in enumerate(gc.get_stats()):
        g.add("magnetar_gc_collections_total", "garbage collections of this generation", f'{{generation="{generation}"}}',
              stats["collections"], kind="counter")
    g.add("magnetar_gc_frozen_objects", "objects gc.freeze() took out of every collection (the startup heap: "
          "broker/cli.py)", "", gc.get_freeze_count())
    g.add("magnetar_stats_samples_total", "times the stats window was sampled; rates change only when this does",
          "", window.samples_taken, kind="counter")
    g.add("magnetar_stats_window_seconds", "time the current rates are computed over (up to stats_update_frequency_s)",
          "", window.topics.span_s)
    return g


def _topic_gauges(g: _Families, topic, values: list[str], delta: Delta, subs) -> None:
    lt = label_text(TOPIC, values)
    backlog = sum(s.backlog for _, s in subs)
    g.add("pulsar_rate_in", "messages/s published, over the stats window", lt, delta.rate(_F["msg_in"]))
    g.add("pulsar_rate_out", "messages/s dispatched, over the stats window", lt, delta.rate(_F["msg_out"]))
    g.add("pulsar_throughput_in", "bytes/s published, over the stats window", lt, delta.rate(_F["bytes_in"]))
    g.add("pulsar_throughput_out", "bytes/s dispatched, over the stats window", lt,
          delta.rate(_F["bytes_out"]))
    g.add("pulsar_storage_write_rate", "entries/s written to storage, over the stats window", lt,
          delta.rate(_F["entries_added"]))
    g.add("pulsar_storage_read_rate", "entries/s read from storage or cache, over the stats window", lt,
          delta.rate(_F["entries_read"]))
    g.add("pulsar_storage_size", "bytes stored for the topic", lt, topic.ml.total_size)
    g.add("pulsar_msg_backlog", "entries not yet acknowledged, summed over subscriptions", lt, backlog)
    g.add("pulsar_storage_backlog_size", "bytes not yet acknowledged by the slowest subscription", lt,
          lifecycle.backlog_bytes(topic, max((s.backlog for _, s in subs), default=0)))
    g.add("pulsar_producers_count", "connected producers", lt, len(topic.producers))
    g.add("pulsar_consumers_count", "connected consumers", lt, sum(len(s.consumers) for _, s in subs))
    g.add("pulsar_subscriptions_count", "subscriptions", lt, len(subs))
    latency = delta.values[_LATENCY_AT:_SIZE_AT]
    for metric, count in zip(_LATENCY_NAMES, latency):
        g.add(metric, "adds in the stats window whose storage write latency fell in this bucket", lt, count)
    g.add("pulsar_storage_write_latency_sum", "storage write latency (ms) summed over the adds in the stats window",
          lt, latency[-2])
    g.add("pulsar_storage_write_latency_count", "adds in the stats window", lt, latency[-1])
    sizes = delta.values[_SIZE_AT:]
    for metric, count in zip(_SIZE_NAMES, sizes):
        g.add(metric, "entries written in the stats window whose size fell in this bucket", lt, count)
    g.add("pulsar_entry_size_sum", "bytes of the entries written in the stats window", lt, sizes[-2])
    g.add("pulsar_entry_size_count", "entries written in the stats window", lt, sizes[-1])


def _subscription_gauges(g: _Families, sub, values: list[str], delta: Delta | None) -> None:
    delta = delta or Delta(0.0, (0.0, 0.0, 0.0))
    lt = label_text(SUBSCRIPTION, values)
    g.add("pulsar_subscription_back_log", "entries not yet acknowledged", lt, sub.backlog)
    g.add("pulsar_subscription_unacked_messages", "messages delivered and not yet acknowledged", lt,
          sum(c.unacked_messages for c in sub.consumers))
    g.add("pulsar_subscription_delayed", "entries held for delayed delivery", lt, _delayed(sub))
    g.add("pulsar_subscription_msg_rate_out", "messages/s dispatched, over the stats window", lt,
          delta.rate(0))
    g.add("pulsar_subscription_msg_throughput_out", "bytes/s dispatched, over the stats window", lt,
          delta.rate(1))
    g.add("pulsar_subscription_msg_rate_redeliver", "redelivery requests/s, over the stats window", lt, delta.rate(2))


def _delayed(sub) -> int:
    tracker = getattr(sub.dispatcher, "delayed", None) if sub.dispatcher is not None else None
    return len(tracker) if tracker is not None else 0


class _NamespaceTotals:
    """Window deltas and state summed over a set of topics (a namespace's, or the whole broker's for the cache)."""

    def __init__(self):
        self.delta = [0.0] * _TOPIC_VECTOR_LEN
        self.rates = [0.0] * _TOPIC_VECTOR_LEN
        self.backlog = 0
        self.stored = 0
        self.cache_bytes = 0

    def add(self, topic, delta: Delta, subs) -> None:
        self.delta = [a + b for a, b in zip(self.delta, delta.values)]
        if delta.span_s > 0:  # each topic's own rate: one loaded mid-window has a shorter span than the others
            self.rates = [a + b / delta.span_s for a, b in zip(self.rates, delta.values)]
        self.backlog += sum(s.backlog for _, s in subs)
        self.stored += topic.ml.total_size * getattr(topic.ml.config, "write_quorum_size", 1)
        self.cache_bytes += topic.ml.cache.size

    def rate(self, field: str) -> float:
        return self.rates[_F[field]]

    def emit_managed_ledger(self, g: _Families, values: list[str]) -> None:
        doc = "over the stats window, summed over the namespace's managed ledgers"
        lt = label_text(NAMESPACE, values)
        g.add("pulsar_ml_AddEntryMessagesRate", f"entries/s added, {doc}", lt, self.rate("entries_added"))
        g.add("pulsar_ml_AddEntryBytesRate", f"bytes/s added, {doc}", lt, self.rate("bytes_added"))
        g.add("pulsar_ml_AddEntrySucceed", f"adds that succeeded, {doc}", lt,
              self.delta[_F["entries_added"]])
        g.add("pulsar_ml_AddEntryErrors", f"adds that failed, {doc}", lt, self.delta[_F["add_errors"]])
        g.add("pulsar_ml_ReadEntriesRate", f"entries/s read, {doc}", lt, self.rate("entries_read"))
        g.add("pulsar_ml_ReadEntriesBytesRate", f"bytes/s read, {doc}", lt,
              self.rate("cache_hit_bytes") + self.rate("cache_miss_bytes"))
        g.add("pulsar_ml_ReadEntriesSucceeded", f"entries read, {doc}", lt,
              self.delta[_F["entries_read"]])
        g.add("pulsar_ml_NumberOfMessagesInBacklog", "entries not yet acknowledged, over every subscription",
              lt, self.backlog)
        g.add("pulsar_ml_StoredMessagesSize", "bytes stored, counting every replica (size x write quorum)",
              lt, self.stored)
        latency = self.delta[_LATENCY_AT:_SIZE_AT]
        for quantile, count in zip(_LATENCY_QUANTILES, latency):
            g.add("pulsar_ml_AddEntryLatencyBuckets", f"adds whose latency (ms) fell in the quantile bucket, {doc}",
                  label_text(NAMESPACE + ["quantile"], values + [quantile]), count)
        g.add("pulsar_ml_AddEntryLatencyBuckets_OVERFLOW", f"adds slower than 1 s, {doc}", lt,
              latency[len(_LATENCY_QUANTILES)])
        sizes = self.delta[_SIZE_AT:]
        for quantile, count in zip(_SIZE_QUANTILES, sizes):
            g.add("pulsar_ml_EntrySizeBuckets", f"entries whose size (bytes) fell in the quantile bucket, {doc}",
                  label_text(NAMESPACE + ["quantile"], values + [quantile]), count)
        g.add("pulsar_ml_EntrySizeBuckets_OVERFLOW", f"entries over 1 MiB, {doc}", lt,
              sizes[len(_SIZE_QUANTILES)])

    def emit_cache(self, g: _Families, values: list[str], open_ledgers: int) -> None:
        lt = label_text(["cluster"], values)
        per_s = self.rate
        g.add("pulsar_ml_cache_hits_rate", "entry reads/s served by the entry cache, over the stats window", lt,
              per_s("cache_hits"))
        g.add("pulsar_ml_cache_misses_rate", "entry reads/s that went to the bookies, over the stats window", lt,
              per_s("cache_misses"))
        g.add("pulsar_ml_cache_hits_throughput", "bytes/s served by the entry cache, over the stats window", lt,
              per_s("cache_hit_bytes"))
        g.add("pulsar_ml_cache_misses_throughput", "bytes/s read from the bookies, over the stats window", lt,
              per_s("cache_miss_bytes"))
        g.add("pulsar_ml_cache_evictions", "entries evicted from the entry cache for room, in the stats window",
              lt, self.delta[_F["cache_evictions"]])
        g.add("pulsar_ml_cache_used_size", "bytes of entries held in the entry caches", lt, self.cache_bytes)
        g.add("pulsar_ml_count", "managed ledgers open in this broker", lt, open_ledgers)


def render_metrics(service) -> bytes:
    """The broker's Prometheus text (format 0.0.4)."""
    return collect(service).render()
