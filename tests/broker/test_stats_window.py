"""The stats window behind /metrics rates, and the bucket counting and naming it reports: pure, from tables."""

from __future__ import annotations

import pytest

from broker.http.metrics import le_suffix, quantile_labels, size_suffix
from broker.stats_window import CounterWindow, Delta, counter_delta, window_deltas
from storage.managed_ledger.stats import ADD_LATENCY_BOUNDS_MS, Buckets


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("old, new, delta", [
    ((0, 0), (5, 10), (5, 10)),
    ((5, 10), (5, 10), (0, 0)),
    ((100, 7), (3, 9), (3, 2)),  # the first counter was reset (topic loaded again): it counts from zero
])
def test_counter_delta(old, new, delta):
    assert counter_delta(old, new) == delta


@pytest.mark.parametrize("samples, expected", [
    ([], {}),
    ([(0.0, {"t": (4.0,)})], {"t": Delta(0.0, (0.0,))}),  # one sample: no span, no rate yet
    ([(0.0, {"t": (0.0,)}), (5.0, {"t": (50.0,)}), (10.0, {"t": (100.0,)})], {"t": Delta(10.0, (100.0,))}),
    # appeared after the first sample: counted from zero at that sample, so its first messages are not lost
    ([(0.0, {}), (5.0, {"t": (30.0,)})], {"t": Delta(5.0, (30.0,))}),
    ([(0.0, {"a": (1.0,)}), (5.0, {"a": (2.0,), "b": (7.0,)}), (10.0, {"b": (9.0,)})],
     {"b": Delta(10.0, (9.0,))}),  # "a" went away: not reported; "b" started from zero after the first sample
])
def test_window_deltas(samples, expected):
    assert window_deltas(samples) == expected


def test_reading_the_window_never_moves_it():
    """Two scrapers in a row see the same rate; only a sample changes it (the old rate was 'since the last scrape')."""
    clock = FakeClock()
    window = CounterWindow(60.0, clock)
    window.sample({"t": (0.0,)})
    clock.t = 10.0
    window.sample({"t": (100.0,)})
    clock.t = 11.0
    first = window.delta("t").rate(0)
    clock.t = 11.5
    assert window.delta("t").rate(0) == first == 10.0
    assert window.samples_taken == 2


def test_the_window_keeps_only_its_length():
    clock = FakeClock()
    window = CounterWindow(60.0, clock)
    for step in range(0, 13):  # a sample every 10 s for 120 s; 10 messages/s for the first minute, then 1/s
        clock.t = step * 10.0
        count = min(step, 6) * 100 + max(step - 6, 0) * 10
        window.sample({"t": (float(count),)})
    assert window.span_s == 60.0
    assert window.delta("t").rate(0) == pytest.approx(1.0)  # only the last minute counts


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="> 0"):
        CounterWindow(0)


@pytest.mark.parametrize("values, counts", [
    ([0.1, 0.5], [2, 0, 0, 0, 0, 0, 0, 0, 0, 0]),  # bounds are inclusive
    ([0.51, 1.0, 4.9], [0, 2, 1, 0, 0, 0, 0, 0, 0, 0]),
    ([999.0, 1000.0, 1000.1, 30_000], [0, 0, 0, 0, 0, 0, 0, 0, 2, 2]),  # above 1 s: the overflow bucket
])
def test_latency_buckets(values, counts):
    b = Buckets(ADD_LATENCY_BOUNDS_MS)
    for v in values:
        b.observe(v)
    assert b.counts == counts
    assert b.snapshot() == (*counts, pytest.approx(sum(values)), len(values))


def test_bucket_bounds_must_increase():
    with pytest.raises(ValueError, match="strictly increasing"):
        Buckets((1, 1, 2))


@pytest.mark.parametrize("bound, suffix", [(0.5, "0_5"), (1, "1"), (1000, "1000")])
def test_latency_suffixes_are_pulsars(bound, suffix):
    assert le_suffix(bound) == suffix


@pytest.mark.parametrize("bound, suffix", [(128, "128"), (512, "512"), (1024, "1_kb"), (16384, "16_kb"),
                                           (102400, "100_kb"), (1048576, "1_mb")])
def test_size_suffixes_are_pulsars(bound, suffix):
    assert size_suffix(bound) == suffix


def test_quantile_labels_are_pulsars():
    assert quantile_labels((0.5, 1, 5)) == ["0.0_0.5", "0.5_1.0", "1.0_5.0"]
