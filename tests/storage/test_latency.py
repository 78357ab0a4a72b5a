import math

import pytest

from storage.latency import percentile, summary_ms


@pytest.mark.parametrize(
    "samples, q, expected",
    [([1, 2], 50, 1), ([1, 2], 51, 2), (list(range(1, 101)), 99, 99), (list(range(1, 101)), 100, 100), ([5], 0, 5)],
)
def test_nearest_rank(samples, q, expected):
    assert percentile(list(reversed(samples)), q) == expected


def test_empty_is_nan():
    assert math.isnan(percentile([], 50)) and summary_ms([])["count"] == 0
