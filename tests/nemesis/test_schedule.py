"""The schedule: seeded (same seed, same plan), and never more bookie or broker faults at once than allowed."""

from __future__ import annotations

import pytest

from loadtest.nemesis.fault import Fault
from loadtest.nemesis.schedule import FAULT_KINDS, plan, plan_round


def kind(name: str, bookies: int = 0, brokers: int = 0, exclusive: bool = False) -> type[Fault]:
    return type(name, (Fault,), {"kind": name, "bookie_faults": bookies, "broker_faults": brokers,
                                 "exclusive": exclusive, "inject": lambda *a: None, "heal": lambda *a: None})


KINDS = {k.kind: k for k in (kind("bookie-a", bookies=1), kind("bookie-b", bookies=1), kind("broker", brokers=1),
                             kind("zk", exclusive=True), kind("net"))}


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    assert plan(7, 50, KINDS, 1, 2) == plan(7, 50, KINDS, 1, 2)
    assert plan(7, 50, KINDS, 1, 2) != plan(8, 50, KINDS, 1, 2)


@pytest.mark.parametrize("bookie_budget,broker_budget", [(0, 0), (0, 2), (1, 1), (1, 2), (2, 2)])
def test_a_round_never_exceeds_the_budgets_and_an_exclusive_fault_is_alone(bookie_budget, broker_budget):
    rounds = plan(1, 500, KINDS, bookie_budget, broker_budget)
    for r in rounds:
        assert sum(KINDS[k].bookie_faults for k in r.kinds) <= bookie_budget
        assert sum(KINDS[k].broker_faults for k in r.kinds) <= broker_budget
        assert len(set(r.kinds)) == len(r.kinds)
        assert "zk" not in r.kinds or r.kinds == ("zk",)
    chosen = {k for r in rounds for k in r.kinds}
    expected = {k for k, c in KINDS.items() if c.bookie_faults <= bookie_budget and c.broker_faults <= broker_budget}
    assert chosen == expected  # every kind that fits is drawn, over enough rounds
    if len([k for k in expected if not KINDS[k].exclusive]) >= 2:
        assert any(len(r.kinds) == 2 for r in rounds)


def test_no_kind_fitting_the_budget_is_a_clear_error():
    import random

    with pytest.raises(ValueError, match="no fault kind fits"):
        plan_round(random.Random(0), {"b": KINDS["bookie-a"]}, 0, 0)


def test_the_registry_names_each_kind_once_and_holds_the_process_faults():
    assert {"kill-bookie", "kill-broker", "kill-standalone", "pause-broker", "pause-bookie", "zookeeper-outage",
            "lose-bookie"} <= set(FAULT_KINDS)
    assert all(name == cls.kind for name, cls in FAULT_KINDS.items())
