"""The broker's hand-written Prometheus text: what Prometheus's own parser reads back, whatever a client names things."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.http.metrics import _Families, label_text


@pytest.mark.parametrize("subscription", ['plain', 'quo"te', "back\\slash", "new\nline", 'all "\\\n three', "ünï"])
def test_label_values_survive_the_round_trip(subscription):
    g = _Families()
    g.add("pulsar_subscription_back_log", "entries", label_text(["topic", "subscription"], ["t", subscription]), 3)
    g.add("pulsar_in_bytes_total", "bytes", label_text(["topic"], ["t"]), 7, kind="counter")
    g.add("pulsar_topics_count", "topics", "", 1)
    families = {f.name: f for f in text_string_to_metric_families(g.render().decode())}
    [sample] = families["pulsar_subscription_back_log"].samples
    assert sample.labels == {"topic": "t", "subscription": subscription} and sample.value == 3
    assert families["pulsar_in_bytes"].type == "counter" and families["pulsar_in_bytes"].samples[0].value == 7
    assert families["pulsar_topics_count"].samples[0].value == 1


@pytest.mark.parametrize("value, text", [(3, "3.0"), (0.25, "0.25"), (float("inf"), "+Inf"), (float("nan"), "NaN")])
def test_numbers(value, text):
    g = _Families()
    g.add("x", "doc", "", value)
    assert g.render().decode().splitlines()[-1] == f"x {text}"


def test_namespace_rates_sum_each_topics_own_rate():
    """A topic loaded mid-window has a shorter span: dividing the summed growth by the longest span would
    understate it; each topic's rate is its growth over its own span."""
    from types import SimpleNamespace as NS

    from broker.http.metrics import _TOPIC_VECTOR_LEN, _NamespaceTotals
    from broker.stats_window import TOPIC_FIELDS, Delta

    def delta(span_s, msgs):
        values = [0.0] * _TOPIC_VECTOR_LEN
        values[TOPIC_FIELDS.index("entries_added")] = msgs
        return Delta(span_s, tuple(values))

    topic = NS(ml=NS(total_size=10, config=NS(write_quorum_size=2), cache=NS(size=4)))
    totals = _NamespaceTotals()
    totals.add(topic, delta(60.0, 600), [])  # 10/s for the whole window
    totals.add(topic, delta(5.0, 50), [])  # 10/s since it loaded 5 s ago
    totals.add(topic, delta(0.0, 0), [])  # loaded since the last sample: no rate yet
    assert totals.rate("entries_added") == 20.0
    assert totals.delta[TOPIC_FIELDS.index("entries_added")] == 650  # window counts are plain sums
    assert (totals.stored, totals.cache_bytes) == (60, 12)
