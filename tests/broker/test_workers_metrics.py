"""Worker 0's merge of every worker's /metrics (broker/http/workers_metrics.py), from tables of expositions."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.http.metrics import _Families, label_text
from broker.http.workers_metrics import ExpositionError, merge_expositions, parse_exposition

TOPIC = ["cluster", "namespace", "topic"]


def exposition(topics: dict[str, float], connections: int, max_buffer: int, samples: int,
               subscription: str = "sub") -> bytes:
    """One worker's text, written by the broker's own writer."""
    g = _Families()
    for topic, rate in topics.items():
        lt = label_text(TOPIC, ["standalone", "public/default", topic])
        g.add("pulsar_rate_in", "messages/s published", lt, rate)
        g.add("pulsar_storage_size", "bytes stored", lt, 100)  # as the broker writes for every topic
        g.add("pulsar_subscription_back_log", "entries",
              label_text(TOPIC + ["subscription"], ["standalone", "public/default", topic, subscription]), 5)
        g.add("pulsar_in_messages_total", "messages published", lt, rate * 10, kind="counter")
    g.add("pulsar_ml_AddEntryMessagesRate", "entries/s", label_text(["cluster", "namespace"],
                                                                    ["standalone", "public/default"]),
          sum(topics.values()))
    g.add("pulsar_active_connections", "client connections", "", connections)
    g.add("pulsar_connection_write_buffer_max_bytes", "the most reply bytes", "", max_buffer)
    g.add("magnetar_stats_samples_total", "times sampled", "", samples, kind="counter")
    return g.render()


def merged(*parts) -> dict[str, dict[tuple, float]]:
    """family -> {sorted label items: value}, read back by Prometheus's own parser (which refuses what it cannot
    read)."""
    text = merge_expositions([(str(i), None if p is None else parse_exposition(p)) for i, p in enumerate(parts)])
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            assert key not in out.setdefault(sample.name, {}), f"duplicate series {sample.name}{key}"
            out[sample.name][key] = sample.value
    return out


def topic_key(topic: str) -> tuple:
    return tuple(sorted({"cluster": "standalone", "namespace": "public/default", "topic": topic}.items()))


def test_each_workers_topics_keep_their_own_series_and_labels():
    m = merged(exposition({"t0": 1.0}, 1, 10, 3), exposition({"t1": 2.0, "t2": 4.0}, 2, 30, 4))
    assert m["pulsar_rate_in"] == {topic_key("t0"): 1.0, topic_key("t1"): 2.0, topic_key("t2"): 4.0}
    assert m["pulsar_in_messages_total"][topic_key("t2")] == 40.0
    assert len(m["pulsar_subscription_back_log"]) == 3


@pytest.mark.parametrize("family, labels, expected", [
    # A namespace spread over workers: its managed-ledger figures are the sums.
    ("pulsar_ml_AddEntryMessagesRate", {"cluster": "standalone", "namespace": "public/default"}, 7.0),
    ("pulsar_active_connections", {}, 3.0),  # the host's connections
    ("pulsar_connection_write_buffer_max_bytes", {}, 30.0),  # a maximum stays a maximum
    ("magnetar_stats_samples_total", {"worker": "0"}, 3.0),  # one process's fact: labelled by worker
    ("magnetar_stats_samples_total", {"worker": "1"}, 4.0),
    ("magnetar_worker_up", {"worker": "0"}, 1.0),
    ("magnetar_worker_up", {"worker": "1"}, 1.0),
])
def test_shared_series_are_summed_maxima_kept_and_per_process_facts_labelled(family, labels, expected):
    m = merged(exposition({"t0": 1.0}, 1, 10, 3), exposition({"t1": 2.0, "t2": 4.0}, 2, 30, 4))
    assert m[family][tuple(sorted(labels.items()))] == expected
    assert () not in m["magnetar_stats_samples_total"]  # no unlabelled series left beside the labelled ones


def test_a_worker_that_did_not_answer_is_left_out_and_marked_down():
    m = merged(exposition({"t0": 1.0}, 1, 10, 3), None, exposition({"t2": 4.0}, 5, 0, 1))
    assert set(m["pulsar_rate_in"]) == {topic_key("t0"), topic_key("t2")}
    assert m["pulsar_active_connections"][()] == 6.0
    assert m["magnetar_worker_up"] == {(("worker", "0"),): 1.0, (("worker", "1"),): 0.0, (("worker", "2"),): 1.0}


def test_a_topic_seen_on_two_workers_during_a_hand_off_stays_one_valid_series():
    m = merged(exposition({"t0": 1.0}, 1, 10, 3), exposition({"t0": 2.0}, 1, 10, 3))
    assert m["pulsar_rate_in"] == {topic_key("t0"): 3.0}


@pytest.mark.parametrize("subscription", ['has space', 'quo"te', "back\\slash", "new\nline", "brace} {x=\"1\"} 7"])
def test_label_values_with_spaces_quotes_and_braces_survive(subscription):
    m = merged(exposition({"t0": 1.0}, 1, 10, 3, subscription), exposition({"t1": 1.0}, 1, 10, 3, subscription))
    subs = {dict(k)["subscription"] for k in m["pulsar_subscription_back_log"]}
    assert subs == {subscription}
    assert sorted(dict(k)["topic"] for k in m["pulsar_subscription_back_log"]) == ["t0", "t1"]


def test_one_worker_alone_reads_back_as_its_own_exposition_plus_its_up():
    own = exposition({"t0": 1.5}, 2, 10, 3)
    m = merged(own)
    assert m["pulsar_rate_in"] == {topic_key("t0"): 1.5}
    assert m["magnetar_worker_up"] == {(("worker", "0"),): 1.0}


@pytest.mark.parametrize("text", [b"pulsar_rate_in{topic=\"t\" 1.0\n", b"pulsar_rate_in{topic=\"t\"} one\n",
                                  b"justaname\n"])
def test_text_that_is_not_an_exposition_is_refused(text):
    with pytest.raises(ExpositionError):
        parse_exposition(text)


def test_without_the_family_that_names_a_workers_topics_every_series_is_merged_one_by_one():
    def topic_only(rate: float) -> bytes:
        g = _Families()
        g.add("pulsar_rate_in", "messages/s", label_text(TOPIC, ["standalone", "public/default", "t0"]), rate)
        return g.render()

    assert merged(topic_only(1.0), topic_only(2.0))["pulsar_rate_in"] == {topic_key("t0"): 3.0}


@pytest.mark.parametrize("text", [b"# HELP x doc\n# TYPE x gauge\nx 1.0\n", b"", b"# HELP x doc\n"])
def test_well_formed_texts_parse(text):
    assert set(parse_exposition(text)) <= {"x"}


def test_samples_outside_a_family_are_refused():
    with pytest.raises(ExpositionError):
        parse_exposition(b"x 1.0\n")
