"""Zone-aware placement: table cases and property tests (pure: seeded rng, no I/O)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.client.config import SOFT, STRICT, PlacementPolicy
from storage.client.placement import BookieInfo, new_ensemble, replace_bookie, write_sets
from storage.errors import NotEnoughBookiesError, PlacementPolicyError

STRICT_POLICY = PlacementPolicy(mode=STRICT)
SOFT_POLICY = PlacementPolicy(mode=SOFT)


def bookies(spec: str, writable: bool = True) -> list[BookieInfo]:
    """'a:2 b:1' -> bookies a0, a1 in zone a (each its own upgrade domain), b0 in zone b."""
    out = []
    for part in spec.split():
        zone, n = part.split(":")
        for i in range(int(n)):
            out.append(BookieInfo(f"{zone}{i}", f"127.0.0.1:{4000 + len(out)}", f"/{zone}/ud{i}", writable))
    return out


def zone_of(candidates):
    return {b.bookie_id: b.zone for b in candidates}


def cls_of(candidates):
    return {b.bookie_id: (b.zone, b.upgrade_domain) for b in candidates}


def assert_rules(ensemble, candidates, qw, min_zones):
    zones, classes = zone_of(candidates), cls_of(candidates)
    assert len(set(ensemble)) == len(ensemble), f"duplicate bookie in {ensemble}"
    for w in write_sets(len(ensemble), qw):
        members = [ensemble[p] for p in w]
        assert len({zones[b] for b in members}) >= min(min_zones, qw), f"write set {members} spans too few zones"
        assert len({classes[b] for b in members}) == len(members), f"write set {members} repeats a (zone, ud)"


def test_write_sets_of_the_ring():
    assert write_sets(3, 2) == [(0, 1), (1, 2), (2, 0)]
    assert write_sets(3, 3) == [(0, 1, 2)]
    assert write_sets(5, 1) == [(0,), (1,), (2,), (3,), (4,)]


@pytest.mark.parametrize(
    "spec, e, qw, qa, want_zones",
    [
        ("a:1 b:1 c:1", 3, 2, 2, 2),
        ("a:1 b:1 c:1", 3, 3, 2, 3),
        ("a:2 b:2 c:2", 5, 3, 2, 2),  # 3-of-3 on a ring of 5 would need 5 colours
        ("a:3 b:3 c:3", 6, 3, 2, 3),
        ("a:3 b:3", 4, 2, 2, 2),
        ("a:3 b:3", 4, 3, 2, 2),
        ("a:5 b:1 c:1", 3, 3, 2, 3),
        ("a:4 b:4 c:4 d:4", 8, 4, 3, 3),
        ("a:2 b:2 c:2", 2, 2, 1, 2),
    ],
)
def test_every_write_set_spans_the_desired_zones(spec, e, qw, qa, want_zones):
    cands = bookies(spec)
    for seed in range(20):
        p = new_ensemble(cands, e, qw, qa, policy=STRICT_POLICY, rng=random.Random(seed))
        assert len(p.ensemble) == e and p.warnings == ()
        assert_rules(p.ensemble, cands, qw, want_zones)


def test_strict_refuses_a_single_zone_with_a_clear_message():
    with pytest.raises(PlacementPolicyError, match=r"need 2 zones per write set, only 1 zone \(a\) has writable bookies"):
        new_ensemble(bookies("a:5"), 3, 2, 2, policy=STRICT_POLICY, rng=random.Random(1))


def test_strict_counts_only_writable_zones():
    cands = bookies("a:3") + bookies("b:2", writable=False)
    with pytest.raises(PlacementPolicyError, match=r"only 1 zone \(a\) has writable bookies"):
        new_ensemble(cands, 3, 2, 2, policy=STRICT_POLICY, rng=random.Random(1))


def test_soft_places_a_single_zone_with_a_warning():
    cands = bookies("a:5")
    p = new_ensemble(cands, 3, 2, 2, policy=SOFT_POLICY, rng=random.Random(1))
    assert len(set(p.ensemble)) == 3
    assert len(p.warnings) == 1
    assert "need 2 zones per write set, only 1 zone (a) has writable bookies" in p.warnings[0]
    assert "placing anyway" in p.warnings[0]


def test_soft_with_repeated_upgrade_domains_warns_and_places():
    same = [BookieInfo(f"b{i}", f"h:{i + 1}", "/default-zone/default-upgradedomain") for i in range(3)]
    p = new_ensemble(same, 3, 3, 2, policy=SOFT_POLICY, rng=random.Random(1))
    assert sorted(p.ensemble) == ["b0", "b1", "b2"]
    assert "repeated (zone, upgrade domain)" in p.warnings[0]


def test_strict_refuses_repeated_upgrade_domain_when_unavoidable():
    cands = [BookieInfo("a0", "h:1", "/a/ud"), BookieInfo("a1", "h:2", "/a/ud"), BookieInfo("b0", "h:3", "/b/ud")]
    with pytest.raises(PlacementPolicyError, match="may not repeat a"):
        new_ensemble(cands, 3, 3, 2, policy=STRICT_POLICY, rng=random.Random(1))


def test_strict_refuses_skewed_zones_it_cannot_arrange():
    # 4 in a, 1 in b: a ring of 5 with Qw 3 always has a window of a's only.
    cands = bookies("a:4 b:1")
    with pytest.raises(PlacementPolicyError, match="writable bookies per zone: a=4, b=1"):
        new_ensemble(cands, 5, 3, 2, policy=STRICT_POLICY, rng=random.Random(1))


def test_same_zone_and_upgrade_domain_never_share_a_write_set():
    # Zone a has two bookies in ud0: they may be in the ensemble but never in one write set.
    cands = [BookieInfo("a0", "h:1", "/a/ud0"), BookieInfo("a0bis", "h:2", "/a/ud0"),
             BookieInfo("b0", "h:3", "/b/ud0"), BookieInfo("c0", "h:4", "/c/ud0")]
    for seed in range(30):
        p = new_ensemble(cands, 4, 2, 2, policy=STRICT_POLICY, rng=random.Random(seed))
        assert_rules(p.ensemble, cands, 2, 2)


def test_not_enough_writable_bookies():
    cands = bookies("a:1 b:1") + bookies("c:3", writable=False)
    with pytest.raises(NotEnoughBookiesError, match="need 3 writable bookies for the ensemble, only 2 available"):
        new_ensemble(cands, 3, 2, 2, policy=SOFT_POLICY, rng=random.Random(1))


def test_exclude_is_respected():
    cands = bookies("a:2 b:2 c:2")
    p = new_ensemble(cands, 3, 2, 2, exclude={"a0", "b0"}, policy=STRICT_POLICY, rng=random.Random(3))
    assert not {"a0", "b0"} & set(p.ensemble)


def test_seeded_rng_is_deterministic_and_spreads_load():
    cands = bookies("a:3 b:3 c:3")
    runs = [new_ensemble(cands, 3, 2, 2, policy=STRICT_POLICY, rng=random.Random(7)).ensemble for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    chosen = set()
    rng = random.Random(11)
    for _ in range(200):
        chosen.update(new_ensemble(cands, 3, 2, 2, policy=STRICT_POLICY, rng=rng).ensemble)
    assert chosen == {b.bookie_id for b in cands}


# ---- replace_bookie --------------------------------------------------------


def test_replace_keeps_zone_rule():
    cands = bookies("a:2 b:2 c:2")
    ensemble = ("a0", "b0", "c0")
    for seed in range(30):
        p = replace_bookie(ensemble, 1, cands, 2, exclude={"b0"}, policy=STRICT_POLICY, rng=random.Random(seed))
        assert p.ensemble[0] == "a0" and p.ensemble[2] == "c0" and p.ensemble[1] not in ensemble
        assert_rules(p.ensemble, cands, 2, 2)
        # Desired is 3 zones capped at Qw=2; b1 is the only full-diversity choice for Qw=3 too.
    p = replace_bookie(ensemble, 1, cands, 3, exclude={"b0"}, policy=STRICT_POLICY, rng=random.Random(0))
    assert p.ensemble == ("a0", "b1", "c0")


def test_replace_never_picks_a_current_member_or_excluded():
    cands = bookies("a:1 b:1 c:1 d:1")
    p = replace_bookie(("a0", "b0", "c0"), 0, cands, 2, exclude={"a0"}, policy=STRICT_POLICY, rng=random.Random(0))
    assert p.ensemble == ("d0", "b0", "c0")


def test_replace_with_no_candidate_left():
    cands = bookies("a:1 b:1 c:1")
    with pytest.raises(NotEnoughBookiesError, match="no writable bookie left to replace b0"):
        replace_bookie(("a0", "b0", "c0"), 1, cands, 2, exclude={"b0"}, policy=SOFT_POLICY, rng=random.Random(0))


def test_replace_strict_refuses_a_zone_collapse_soft_warns():
    # Only zone-a candidates left; position 1's write sets are (0,1) with a0 and (1,2) with c0.
    cands = bookies("a:3 c:1") + [BookieInfo("b0", "h:9", "/b/ud0")]
    ensemble = ("a0", "b0", "a1")
    with pytest.raises(PlacementPolicyError, match="no replacement for b0 at position 1"):
        replace_bookie(ensemble, 1, [c for c in cands if c.zone == "a"], 2, exclude={"b0"},
                       policy=STRICT_POLICY, rng=random.Random(0))
    p = replace_bookie(ensemble, 1, [c for c in cands if c.zone == "a"], 2, exclude={"b0"},
                       policy=SOFT_POLICY, rng=random.Random(0))
    assert p.ensemble == ("a0", "a2", "a1") and "anyway" in p.warnings[0]


def test_replace_tolerates_unregistered_members():
    # A dead, unregistered member has no known location: it neither helps nor conflicts.
    cands = bookies("a:2 b:2")
    p = replace_bookie(("gone:1", "a0", "b0"), 1, cands, 2, exclude={"a0"}, policy=STRICT_POLICY, rng=random.Random(0))
    assert p.ensemble == ("gone:1", "a1", "b0") and p.warnings == ()


# ---- properties --------------------------------------------------------------

zone_counts = st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(counts=zone_counts, e=st.integers(1, 7), qw_off=st.integers(0, 6), qa_off=st.integers(0, 6), seed=st.integers(0, 2**32))
def test_property_placement_honours_rules_or_refuses(counts, e, qw_off, qa_off, seed):
    qw = max(1, e - qw_off)
    qa = max(1, qw - qa_off)
    cands = bookies(" ".join(f"z{i}:{n}" for i, n in enumerate(counts)))
    try:
        p = new_ensemble(cands, e, qw, qa, policy=STRICT_POLICY, rng=random.Random(seed))
    except NotEnoughBookiesError:
        assert len(cands) < e
        return
    except PlacementPolicyError:
        # Strict only refuses when soft mode would have had to relax something.
        soft = new_ensemble(cands, e, qw, qa, policy=SOFT_POLICY, rng=random.Random(seed))
        assert soft.warnings
        return
    assert_rules(p.ensemble, cands, qw, 2)
    if len(counts) >= 2:
        # Invariant 7: with >= 2 zones every write set of >= 2 bookies spans >= 2 zones.
        for w in write_sets(e, qw):
            assert qw < 2 or len({zone_of(cands)[p.ensemble[i]] for i in w}) >= 2


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), e=st.integers(2, 6), qw_off=st.integers(0, 4), victim=st.integers(0, 5))
def test_property_replace_keeps_rules_with_three_zones(seed, e, qw_off, victim):
    qw = max(2, e - qw_off)
    cands = bookies("a:4 b:4 c:4")
    rng = random.Random(seed)
    ensemble = new_ensemble(cands, e, qw, min(2, qw), policy=STRICT_POLICY, rng=rng).ensemble
    index = victim % e
    p = replace_bookie(ensemble, index, cands, qw, exclude={ensemble[index]}, policy=STRICT_POLICY, rng=rng)
    assert p.warnings == ()
    assert p.ensemble[index] not in ensemble
    assert all(p.ensemble[i] == ensemble[i] for i in range(e) if i != index)
    assert_rules(p.ensemble, cands, qw, 2)


@pytest.mark.parametrize("base, min_zones, expected", [
    (SOFT_POLICY, 3, PlacementPolicy(SOFT, 3, 3, 3)),
    (SOFT_POLICY, 1, PlacementPolicy(SOFT, 1, 3, 1)),  # the desired spread stays: the minimum only forbids less
    (PlacementPolicy(SOFT, 1, 2), 3, PlacementPolicy(SOFT, 3, 3, 3)),
    (STRICT_POLICY, 2, PlacementPolicy(STRICT, 2, 3, 2)),
])
def test_a_ledgers_own_minimum_of_zones_is_required_and_keeps_the_desired_spread(base, min_zones, expected):
    assert base.requiring_zones(min_zones) == expected
    assert expected.validate() is expected


def test_a_ledgers_own_minimum_of_zones_must_be_positive():
    with pytest.raises(ValueError, match="min_zones"):
        SOFT_POLICY.requiring_zones(0)


@pytest.mark.parametrize("spec, required, placed", [
    ("a:4 b:4", 3, False),  # two zones cannot give three, soft or not
    ("a:4 b:4", 2, True),
    ("a:4 b:4 c:1", 3, True),
])
def test_soft_placement_never_goes_below_a_required_zone_count(spec, required, placed):
    policy = SOFT_POLICY.requiring_zones(required)
    candidates = bookies(spec)
    if not placed:
        with pytest.raises(PlacementPolicyError, match="zones"):
            new_ensemble(candidates, 3, 3, 2, policy=policy, rng=random.Random(1))
        return
    ring = new_ensemble(candidates, 3, 3, 2, policy=policy, rng=random.Random(1)).ensemble
    zones = zone_of(candidates)
    assert all(len({zones[ring[p]] for p in w}) >= required for w in write_sets(3, 3))


def test_a_required_zone_count_still_lets_soft_mode_repeat_an_upgrade_domain():
    """Bookies without locations (one zone, one upgrade domain) still serve a ledger that requires one zone."""
    candidates = [BookieInfo(f"b{i}", f"127.0.0.1:{4000 + i}") for i in range(3)]
    placement = new_ensemble(candidates, 3, 2, 2, policy=SOFT_POLICY.requiring_zones(1), rng=random.Random(1))
    assert sorted(placement.ensemble) == ["b0", "b1", "b2"] and placement.warnings


def test_replacing_a_bookie_never_goes_below_a_required_zone_count():
    candidates = bookies("a:2 b:1 c:1")
    ring = ("a0", "b0", "c0")
    with pytest.raises(PlacementPolicyError):  # only a1 is left: the write set would span two zones
        replace_bookie(ring, 2, candidates, 3, exclude=["c0"], policy=SOFT_POLICY.requiring_zones(3),
                       rng=random.Random(1))
    assert replace_bookie(ring, 2, candidates, 3, exclude=["c0"], policy=SOFT_POLICY,
                          rng=random.Random(1)).ensemble == ("a0", "b0", "a1")
