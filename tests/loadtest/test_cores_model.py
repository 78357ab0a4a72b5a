"""The `cores` suite's model (loadtest/bench/cores.py): what N workers and B bookies give on bigger machines, from
tables of CPU costs."""

from __future__ import annotations

import pytest

from loadtest.bench.cores import bookies_for, capacity_msg_per_s, model


@pytest.mark.parametrize("cores, worker_s_per_m, bookie_s_per_m, expected", [
    (8, 1.0, 1.0, 4),     # half the CPU per message is the bookies': half the cores
    (16, 1.0, 1.0, 8),
    (16, 3.0, 1.0, 4),    # a quarter
    (8, 3.0, 1.0, 3),     # 2 would do; never fewer than the default 3
    (2, 1.0, 1.0, 3),
    (16, 1.375, 2.125, 10),  # ceil(16 x 2.125 / 3.5) = ceil(9.71)
    (8, 0.0, 0.0, 3),     # nothing measured: the default
])
def test_bookies_get_their_share_of_the_cores(cores, worker_s_per_m, bookie_s_per_m, expected):
    assert bookies_for(cores, worker_s_per_m, bookie_s_per_m) == expected


@pytest.mark.parametrize("bookies, bound, msg_per_s", [
    (3, "bookies", 3e6),     # 3 bookies at 1 s per million: 3M msg/s, under the 16 workers' 16M
    (8, "cores", 8e6),       # enough bookies: the 16 cores shared by both kinds of work bound it
    (16, "cores", 8e6),      # more bookies than their share add nothing
])
def test_more_bookies_lift_the_bookie_bound_up_to_the_cores(bookies, bound, msg_per_s):
    m = capacity_msg_per_s(16, 16, 1.0, 1.0, None, bookies=bookies)
    assert (m["bound_by"], m["msg_per_s"]) == (bound, pytest.approx(msg_per_s))


def test_the_model_gives_each_core_count_its_bookies_and_keeps_the_three_bookie_row():
    costs = {"worker_cpu_s_per_m": 1.0, "bookie_cpu_s_per_m": 1.0}
    reference = {"produce": costs, "catchup": costs, "produce-small": costs}
    m = model(reference, disk_bytes_per_s=1e12)
    for cores, bookies in (("8", 4), ("16", 8)):
        row = m["catchup"][cores]["cpu_only"]
        assert row["n_workers"]["bound_by"] == "bookies" and row["ratio"] == pytest.approx(3.0)
        assert row["n_workers_more_bookies"]["bookies"] == bookies
        assert row["n_workers_more_bookies"]["bound_by"] == "cores"
        assert row["ratio_more_bookies"] == pytest.approx(int(cores) / 2)
