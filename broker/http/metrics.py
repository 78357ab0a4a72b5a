"""Prometheus text for the broker: per-topic and per-subscription families with Pulsar's names and labels.

Rates are computed between scrapes from the topics' counters (Pulsar reports
rates over its stats interval); counters are exported as they are.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class _BrokerCollector:
    def __init__(self, service):
        self.service = service
        self._last: dict[str, tuple[float, int, int]] = {}  # topic -> (time, msg in, msg out) at the last scrape

    def collect(self):
        service = self.service
        cluster = service.config.cluster_name
        labels = ["cluster", "namespace", "topic"]
        g = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
            ("pulsar_rate_in", "messages/s published since the last scrape"),
            ("pulsar_rate_out", "messages/s dispatched since the last scrape"),
            ("pulsar_storage_size", "bytes stored for the topic"),
            ("pulsar_msg_backlog", "entries not yet acknowledged, summed over subscriptions"),
            ("pulsar_producers_count", "connected producers"),
            ("pulsar_consumers_count", "connected consumers"),
            ("pulsar_subscriptions_count", "subscriptions"),
        )}
        c_in = CounterMetricFamily("pulsar_in_messages", "messages published", labels=labels)
        c_out = CounterMetricFamily("pulsar_out_messages", "messages dispatched", labels=labels)
        sub_backlog = GaugeMetricFamily("pulsar_subscription_back_log", "entries not yet acknowledged",
                                        labels=labels + ["subscription"])
        now = time.monotonic()
        for name, topic in list(service.topics.items()):
            values = [cluster, str(topic.name.namespace_name), name]
            then, last_in, last_out = self._last.get(name, (now, topic.msg_in, topic.msg_out))
            elapsed = max(now - then, 1e-9)
            self._last[name] = (now, topic.msg_in, topic.msg_out)
            g["pulsar_rate_in"].add_metric(values, (topic.msg_in - last_in) / elapsed if now > then else 0.0)
            g["pulsar_rate_out"].add_metric(values, (topic.msg_out - last_out) / elapsed if now > then else 0.0)
            g["pulsar_storage_size"].add_metric(values, topic.ml.total_size)
            g["pulsar_producers_count"].add_metric(values, len(topic.producers))
            g["pulsar_consumers_count"].add_metric(values, sum(len(s.consumers) for s in topic.subscriptions.values()))
            g["pulsar_subscriptions_count"].add_metric(values, len(topic.subscriptions))
            backlog = 0
            for sub_name, sub in topic.subscriptions.items():
                sub_backlog.add_metric(values + [sub_name], sub.backlog)
                backlog += sub.backlog
            g["pulsar_msg_backlog"].add_metric(values, backlog)
            c_in.add_metric(values, topic.msg_in)
            c_out.add_metric(values, topic.msg_out)
        yield from g.values()
        yield c_in
        yield c_out
        yield sub_backlog
        yield GaugeMetricFamily("pulsar_active_connections", "client connections", value=len(service.connections))
        buffered = [conn.transport.get_write_buffer_size() for conn in list(service.connections)
                    if conn.transport is not None and not conn.closed]
        yield GaugeMetricFamily("pulsar_connection_write_buffer_bytes", "reply bytes not yet taken by the clients",
                                value=sum(buffered))
        yield GaugeMetricFamily("pulsar_connection_write_buffer_max_bytes",
                                "the most reply bytes waiting for any one client", value=max(buffered, default=0))
        yield GaugeMetricFamily("pulsar_topics_count", "topics loaded in this broker", value=len(service.topics))


def render_metrics(service) -> bytes:
    registry = getattr(service, "_metrics_registry", None)
    if registry is None:
        registry = CollectorRegistry()
        registry.register(_BrokerCollector(service))
        service._metrics_registry = registry
    return generate_latest(registry)
