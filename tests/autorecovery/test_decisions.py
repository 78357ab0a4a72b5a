"""Pure decisions of autorecovery, from tables: fragments, what to repair, when a bookie counts as lost, marks."""

from __future__ import annotations

import pytest

from storage.autorecovery import checker
from storage.autorecovery.auditor import LossTracker
from storage.autorecovery.underreplication import Mark, ledger_id_from_mark, mark_path
from storage.ledger_metadata import LedgerMetadata, LedgerState


def md(ensembles, state=LedgerState.CLOSED, last=99, e=3, qw=2):
    return LedgerMetadata(ledger_id=7, ensemble_size=e, write_quorum_size=qw, ack_quorum_size=2, password=b"",
                          ensembles=tuple((f, tuple(b)) for f, b in ensembles), state=state, last_entry_id=last)


@pytest.mark.parametrize("meta, expected", [
    (md([(0, "abc")]), [(0, 99)]),
    (md([(0, "abc"), (40, "abd")]), [(0, 39), (40, 99)]),
    (md([(0, "abc"), (40, "abd")], last=30), [(0, 30), (40, 30)]),  # an empty last fragment
    (md([(0, "abc"), (40, "abd")], state=LedgerState.OPEN, last=-1), [(0, 39), (40, None)]),
])
def test_fragments(meta, expected):
    assert [(f.first_entry_id, f.last_entry_id) for f in checker.fragments(meta)] == expected


def test_entries_at_follows_the_striping_rule():
    meta = md([(0, "abc")], last=5)
    frag = checker.fragments(meta)[0]
    for pos in range(3):
        held = checker.entries_at(meta, frag, pos)
        assert held == [e for e in range(6) if "abc"[pos] in meta.write_set(e)]


@pytest.mark.parametrize("meta, live, move_off, replace, blocked, waiting", [
    (md([(0, "abc")]), "abc", "", {}, False, False),
    (md([(0, "abc")]), "ab", "", {0: (2,)}, False, False),
    (md([(0, "abc"), (50, "abd")]), "abd", "", {0: (2,)}, False, False),
    (md([(0, "abc"), (50, "abd")], state=LedgerState.OPEN, last=-1), "abc", "", {1: (2,)}, True, False),
    (md([(0, "abc"), (50, "abd")], state=LedgerState.OPEN, last=-1), "abcd", "d", {}, False, True),
    (md([(0, "abc"), (50, "abd")], state=LedgerState.OPEN, last=-1), "abd", "", {0: (2,)}, False, False),
    (md([(0, "abc")]), "abc", "b", {0: (1,)}, False, False),
])
def test_plan_repair(meta, live, move_off, replace, blocked, waiting):
    plan = checker.plan_repair(meta, set(live), set(move_off))
    assert plan.replace == {k: v for k, v in replace.items() if k < len(meta.ensembles) and
                            not checker.fragments(meta)[k].writing}
    assert (plan.writing_fragment_blocked, plan.writing_fragment_waiting) == (blocked, waiting)


def test_loss_tracker_waits_the_delay_and_forgives_a_return():
    t = LossTracker()
    t.observe({"a", "b"}, {"a", "b"}, now=0)
    t.observe({"a"}, {"a", "b"}, now=1)
    assert t.due(now=5, delay_s=5) == set()
    assert t.due(now=6, delay_s=5) == {"b"}
    t.reported |= {"b"}
    assert t.due(now=7, delay_s=5) == set() and t.lost(now=7, delay_s=5) == {"b"}
    t.observe({"a", "b"}, {"a", "b"}, now=8)  # back: forgotten, a later loss counts again
    assert t.lost(now=100, delay_s=5) == set() and "b" not in t.reported
    t.observe({"a"}, {"a", "b"}, now=101)
    assert t.due(now=106, delay_s=5) == {"b"}


def test_marks_merge_and_survive_garbage():
    a, b = Mark(missing=frozenset({"x"})), Mark(replace=frozenset({"y"}), check=True)
    assert Mark.from_bytes(a.merge(b).to_bytes()) == Mark(frozenset({"x"}), frozenset({"y"}), True)
    assert Mark.from_bytes(b"not json").check, "an unreadable mark still asks for a full check"


@pytest.mark.parametrize("lid", [0, 1, 12345, 9_876_543_210])
def test_mark_paths_are_hierarchical_and_invertible(lid):
    path = mark_path(lid)
    assert path.startswith("/ledgers/underreplication/ledgers/") and path.count("/") == 6
    assert ledger_id_from_mark(path) == lid


@pytest.mark.parametrize("done, elapsed, rate, expected", [
    (1, 0.0, 10.0, 0.1),   # ahead of the budget: wait
    (10, 1.0, 10.0, 0.0),  # on schedule
    (10, 2.0, 10.0, 0.0),  # behind (slow disk): never negative
    (5, 0.2, 10.0, 0.3),
])
def test_scrub_rate_limit(done, elapsed, rate, expected):
    from storage.bookie.scrub import pause_s

    assert pause_s(done, elapsed, rate) == pytest.approx(expected)
