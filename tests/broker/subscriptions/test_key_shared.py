"""Key_Shared: the hash, both selectors, the recently-joined rule and splitting a batch among consumers."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from broker.errors import ConsumerAssignError
from broker.subscriptions import ConsumerRef
from broker.subscriptions.key_shared import (
    STICKY_KEY_HASH_RANGE, ConsistentHashingSelector, RecentlyJoined, StickyRangesSelector, assign_entries,
    joins_as_recent, murmur3_32, select_replay, sticky_key_hash,
)


@dataclass(eq=False)
class C:
    name: str


@dataclass
class Entry:
    position: tuple
    key_hash: int
    num_messages: int = 1


# ---- the hash ---------------------------------------------------------------------------------


@pytest.mark.parametrize("data, seed, expected", [
    (b"", 0, 0x00000000),
    (b"", 1, 0x514E28B7),
    (b"", 0xFFFFFFFF, 0x81F16F39),
    (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
    (b"hello", 0, 0x248BFA47),
    (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
    # the SMHasher-style vectors with seed 0x9747b28c cover every tail length
    (b"a", 0x9747B28C, 0x7FA09EA6),
    (b"ab", 0x9747B28C, 0x74875592),
    (b"abc", 0x9747B28C, 0xC84A62DD),
    (b"abcd", 0x9747B28C, 0xF0478627),
    (b"aaaa", 0x9747B28C, 0x5A97808A),
    (b"Hello, world!", 0x9747B28C, 0x24884CBA),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
])
def test_murmur3_known_vectors(data, seed, expected):
    assert murmur3_32(data, seed) == expected


@pytest.mark.parametrize("key, expected", [
    (b"hello", 0x248BFA47 % 65536),
    (b"", 0),
    (b"The quick brown fox jumps over the lazy dog", (0x2E4FF723 & 0x7FFFFFFF) % 65536),
])
def test_sticky_key_hash(key, expected):
    assert sticky_key_hash(key) == expected


@given(st.binary(max_size=64))
def test_sticky_key_hash_is_in_range(key):
    assert 0 <= sticky_key_hash(key) < STICKY_KEY_HASH_RANGE


# ---- AUTO_SPLIT: the hash ring ------------------------------------------------------------------


def random_key_hashes(n=10_000, seed=7):
    rng = random.Random(seed)
    return [sticky_key_hash(rng.randbytes(rng.randint(1, 24))) for _ in range(n)]


def ring_of(*consumers, points=100):
    ring = ConsistentHashingSelector(points)
    for c in consumers:
        ring.add_consumer(c)
    return ring


def test_ring_spreads_keys_over_consumers():
    consumers = [C("consumer-0"), C("consumer-1"), C("consumer-2")]
    ring = ring_of(*consumers)
    keys = random_key_hashes()
    owners = [ring.select(k) for k in keys]
    for c in consumers:
        assert 0.15 <= owners.count(c) / len(keys) <= 0.50, c.name


def test_same_key_same_consumer_whatever_the_join_order():
    a, b, c = C("a"), C("b"), C("c")
    keys = random_key_hashes(2_000)
    assert [ring_of(a, b, c).select(k) for k in keys] == [ring_of(c, a, b).select(k) for k in keys]


def test_removing_a_consumer_moves_only_its_keys():
    consumers = [C(f"c{i}") for i in range(4)]
    ring = ring_of(*consumers)
    keys = random_key_hashes()
    before = [ring.select(k) for k in keys]
    ring.remove_consumer(consumers[1])
    after = [ring.select(k) for k in keys]
    assert consumers[1] not in after
    moved = [(b, a) for b, a in zip(before, after) if b is not a]
    assert moved and all(b is consumers[1] for b, _ in moved)


def test_adding_a_consumer_moves_keys_only_to_it():
    a, b, c = C("a"), C("b"), C("c")
    ring = ring_of(a, b)
    keys = random_key_hashes()
    before = [ring.select(k) for k in keys]
    ring.add_consumer(c)
    after = [ring.select(k) for k in keys]
    assert all(now is was or now is c for was, now in zip(before, after))
    assert after.count(c) > 0


def test_ring_with_consumer_ids_and_names():
    ring = ConsistentHashingSelector(50)
    ring.add_consumer(1, name="alpha")
    ring.add_consumer(ConsumerRef(2, "beta"))
    owners = {ring.select(k) for k in random_key_hashes(1_000)}
    assert owners == {1, ConsumerRef(2, "beta")}
    ring.remove_consumer(1)
    assert {ring.select(k) for k in random_key_hashes(1_000)} == {ConsumerRef(2, "beta")}


def test_namesakes_share_their_points_and_split_the_keys():
    first, second = C("same"), C("same")
    ring = ring_of(first, second)
    owners = [ring.select(k) for k in random_key_hashes(2_000)]
    assert 0.3 <= owners.count(first) / len(owners) <= 0.7
    ring.remove_consumer(first)
    assert {ring.select(k) for k in random_key_hashes(200)} == {second}


def test_empty_ring_and_idempotent_membership():
    ring = ConsistentHashingSelector(10)
    assert ring.select(5) is None
    a = C("a")
    ring.add_consumer(a)
    ring.add_consumer(a)
    ring.remove_consumer(C("never-added"))
    assert len(ring) == 1
    ring.remove_consumer(a)
    assert ring.select(5) is None and len(ring) == 0


def test_ring_ranges_cover_the_hash_space_and_match_select():
    consumers = [C("x"), C("y"), C("z")]
    ring = ring_of(*consumers, points=20)
    ranges = ring.consumer_ranges()
    covered = sorted(r for rs in ranges.values() for r in rs)
    assert covered[0][0] == 0 and covered[-1][1] == STICKY_KEY_HASH_RANGE - 1
    assert all(prev[1] + 1 == nxt[0] for prev, nxt in zip(covered, covered[1:]))
    for consumer, rs in ranges.items():
        for start, end in rs:
            assert ring.select(start) is consumer and ring.select(end) is consumer


# ---- STICKY: declared ranges --------------------------------------------------------------------


@pytest.mark.parametrize("new_ranges, error", [
    ([(100, 200)], None),
    ([(100, 100), (65535, 65535)], None),
    ([(99, 100)], "overlaps \\[0, 99\\] of consumer 'first'"),
    ([(50, 60)], "overlaps"),
    ([(0, 65535)], "overlaps"),
    ([(1000, 2000)], "overlaps \\[1000, 1000\\]"),
    ([(200, 300), (250, 260)], "overlaps .* of the same consumer"),
    ([(300, 200)], "start > end"),
    ([(60000, 65536)], "not within"),
    ([(-1, 5)], "not within"),
    ([], "at least one"),
])
def test_sticky_ranges_validation(new_ranges, error):
    sel = StickyRangesSelector()
    sel.add_consumer(C("first"), [(0, 99), (1000, 1000)])
    newcomer = C("second")
    if error is None:
        sel.add_consumer(newcomer, new_ranges)
        assert all(sel.select(s) is newcomer and sel.select(e) is newcomer for s, e in new_ranges)
    else:
        with pytest.raises(ConsumerAssignError, match=error):
            sel.add_consumer(newcomer, new_ranges)
        assert newcomer not in sel.consumer_ranges()  # refused as a whole


def test_sticky_select_and_remove():
    a, b = C("a"), C("b")
    sel = StickyRangesSelector()
    sel.add_consumer(a, [(0, 32767)])
    sel.add_consumer(b, [(40000, 65535), (32768, 32768)])
    assert [sel.select(h) for h in (0, 32767, 32768, 32769, 39999, 40000, 65535)] == [a, a, b, None, None, b, b]
    assert sel.select(65536 + 5) is a  # hashes wider than the range are reduced modulo 65536, as Pulsar does
    assert sel.consumer_ranges() == {a: [(0, 32767)], b: [(32768, 32768), (40000, 65535)]}
    sel.remove_consumer(a)
    assert sel.select(5) is None
    sel.add_consumer(C("c"), [(0, 100)])  # a's ranges are free again
    assert len(sel) == 2


# ---- recently joined consumers --------------------------------------------------------------------


@pytest.mark.parametrize("joined_at, position, mark_delete, allowed", [
    ((3, 10), (3, 9), (3, 2), True),     # older than its arrival
    ((3, 10), (3, 10), (3, 2), False),   # the read position at arrival is already "new"
    ((3, 10), (4, 0), (3, 2), False),
    ((3, 10), (2, 99), (2, 50), True),
    ((3, 10), (3, 12), (3, 8), False),   # (3, 9) still unacked
    ((3, 10), (3, 12), (3, 9), True),    # everything before its arrival acked
    ((3, 10), (3, 12), (3, 15), True),
])
def test_recently_joined_rule(joined_at, position, mark_delete, allowed):
    joined = RecentlyJoined()
    newcomer, old = C("new"), C("old")
    joined.add(newcomer, joined_at)
    assert joined.allowed(newcomer, position, mark_delete) is allowed
    assert joined.allowed(old, position, mark_delete)  # consumers that did not just join are free


def test_prune_forgets_consumers_that_caught_up():
    joined = RecentlyJoined()
    a, b = C("a"), C("b")
    joined.add(a, (1, 5))
    joined.add(b, (1, 9))
    assert joined.prune((1, 3)) == [] and len(joined) == 2
    assert joined.prune((1, 4)) == [a]
    assert a not in joined and joined.limit_for(b) == (1, 9)
    assert joined.prune((2, 0)) == [b] and len(joined) == 0


def test_ledger_boundary_needs_the_ledgers_next_position():
    # joined at the first entry of ledger 4; everything in ledger 3 (last entry 9) is acked
    def next_valid(p):
        return (4, 0) if p == (3, 9) else (p[0], p[1] + 1)

    default, exact = RecentlyJoined(), RecentlyJoined(next_position=next_valid)
    newcomer = C("new")
    default.add(newcomer, (4, 0))
    exact.add(newcomer, (4, 0))
    assert not default.allowed(newcomer, (4, 0), (3, 9))  # conservative: waits one more ack
    assert exact.allowed(newcomer, (4, 0), (3, 9))
    assert default.allowed(newcomer, (4, 1), (4, 0))


def test_replay_is_capped_by_the_earliest_newcomer():
    joined = RecentlyJoined()
    first, second = C("first"), C("second")
    joined.add(first, (1, 2))
    joined.add(second, (1, 4))
    assert joined.allowed(second, (1, 3), (1, 0))
    assert not joined.allowed(second, (1, 3), (1, 0), replay=True)
    assert joined.allowed(second, (1, 1), (1, 0), replay=True)


@pytest.mark.parametrize("before, since_unacked, out_of_order, recent", [
    (0, 50, False, False),   # the first consumer
    (1, 50, False, True),
    (3, 1, False, False),    # nothing out that could be reordered
    (3, 2, False, True),
    (3, 50, True, False),    # the consumer asked for out-of-order delivery
])
def test_joins_as_recent(before, since_unacked, out_of_order, recent):
    assert joins_as_recent(before, since_unacked, out_of_order) is recent


# ---- splitting a batch ------------------------------------------------------------------------------


class FixedSelector:
    def __init__(self, owners):
        self.owners = owners

    def select(self, key_hash):
        return self.owners.get(key_hash)


A, B = "A", "B"


@pytest.mark.parametrize("entries, permits, held, sent, later", [
    # keys 1, 2 -> A; key 3 -> B
    ([(0, 1), (1, 3), (2, 2)], {A: 5, B: 5}, (), {A: [0, 2], B: [1]}, []),
    # A runs out after one entry: the rest of A's keys wait, B goes on
    ([(0, 1), (1, 2), (2, 3), (3, 1)], {A: 1, B: 5}, (), {A: [0], B: [2]}, [1, 3]),
    # once a key's entry waits, its later entries wait too even if permits would allow
    ([(0, 1), (1, 1), (2, 2)], {A: 1, B: 0}, (), {A: [0]}, [1, 2]),
    # a key with older entries already in the replay queue waits behind them
    ([(0, 1), (1, 2)], {A: 5}, (1,), {A: [1]}, [0]),
    # no consumer owns the key (a STICKY gap)
    ([(0, 9), (1, 1)], {A: 5}, (), {A: [1]}, [0]),
    # a consumer without permits (or unknown to ``permits``) gets nothing
    ([(0, 3)], {A: 5}, (), {}, [0]),
])
def test_assign_entries_table(entries, permits, held, sent, later):
    selector = FixedSelector({1: A, 2: A, 3: B})
    batch = [Entry((1, e), k) for e, k in entries]
    result = assign_entries(batch, selector, permits, held_key_hashes=held)
    assert {c: [e.position[1] for e in es] for c, es in result.by_consumer.items()} == sent
    assert [e.position[1] for e in result.replay_later] == later


def test_assign_entries_counts_batch_sizes_against_permits():
    batch = [Entry((1, 0), 1, 10), Entry((1, 1), 2, 1), Entry((1, 2), 2, 1)]
    result = assign_entries(batch, FixedSelector({1: A, 2: A}), {A: 10})
    assert result.by_consumer == {A: [batch[0]]}  # the batch of 10 spent every permit
    assert result.replay_later == batch[1:]


def test_assign_entries_holds_back_new_entries_from_a_recent_consumer():
    joined = RecentlyJoined()
    joined.add(B, (1, 2))
    batch = [Entry((1, 1), 3), Entry((1, 2), 3), Entry((1, 3), 1)]
    result = assign_entries(batch, FixedSelector({1: A, 3: B}), {A: 5, B: 5},
                            recently_joined=joined, mark_delete_position=(1, 0))
    assert result.by_consumer == {B: [batch[0]], A: [batch[2]]}
    assert result.replay_later == [batch[1]]
    # once everything before (1, 2) is acked B is free
    result = assign_entries(batch[1:2], FixedSelector({3: B}), {B: 5}, recently_joined=joined,
                            mark_delete_position=(1, 1))
    assert result.by_consumer == {B: [batch[1]]}


@pytest.mark.parametrize("entries, waiting, sent, later", [
    # an older entry of key 1 waits at (1, 5): a newer one waits behind it, an older one may go
    ([(7, 1), (8, 2)], {1: (1, 5)}, {A: [8]}, [7]),
    ([(3, 1)], {1: (1, 5)}, {A: [3]}, []),
    # entries read back from the replay queue left it first: nothing older waits, so they go in order
    ([(5, 1), (6, 1)], {}, {A: [5, 6]}, []),
])
def test_assign_entries_waits_only_behind_older_entries_of_the_key(entries, waiting, sent, later):
    batch = [Entry((1, e), k) for e, k in entries]
    result = assign_entries(batch, FixedSelector({1: A, 2: A}), {A: 5}, waiting_since=waiting)
    assert {c: [e.position[1] for e in es] for c, es in result.by_consumer.items()} == sent
    assert [e.position[1] for e in result.replay_later] == later


@pytest.mark.parametrize("waiting, permits, count, chosen", [
    # keys 1, 2 -> A; key 3 -> B. A is busy: only B's entries are read again
    ([(0, 1), (1, 3), (2, 2), (3, 3)], {A: 0, B: 5}, 10, [1, 3]),
    # the head of the queue is a busy consumer's: it does not stop the others (the Key_Shared stall)
    ([(e, 1) for e in range(50)] + [(50, 3)], {A: 0, B: 1}, 10, [50]),
    # permits count entries; once a key stays, its later entries stay
    ([(0, 1), (1, 1), (2, 2)], {A: 1}, 10, [0]),
    # at most ``count``
    ([(0, 3), (1, 3), (2, 3)], {B: 9}, 2, [0, 1]),
    # a position whose key is unknown (given back by a consumer) is always read: its key is learned then
    ([(0, None), (1, 1)], {A: 0}, 10, [0]),
    # nobody owns key 9 (a STICKY gap): it stays
    ([(0, 9), (1, 3)], {B: 5}, 10, [1]),
])
def test_select_replay_table(waiting, permits, count, chosen):
    selector = FixedSelector({1: A, 2: A, 3: B})
    picked = select_replay([((1, e), k) for e, k in waiting], selector, permits, count)
    assert [p[1] for p in picked] == chosen


def test_select_replay_keeps_a_recent_consumers_newer_entries():
    joined = RecentlyJoined()
    joined.add(B, (1, 2))
    waiting = [((1, 1), 3), ((1, 2), 3), ((1, 3), 1)]
    picked = select_replay(waiting, FixedSelector({1: A, 3: B}), {A: 5, B: 5}, 10,
                           recently_joined=joined, mark_delete_position=(1, 0))
    assert picked == [(1, 1), (1, 3)]


def test_recently_joined_at_a_ledger_boundary_is_released_by_the_last_ack_of_the_previous_ledger():
    """With the managed ledger's next position, a consumer that joined at (2, 0) is free once (1, 9), the last
    entry of ledger 1, is acknowledged; within-ledger arithmetic would wait for (2, 0) itself, which the
    newcomer may own: a deadlock."""
    next_position = lambda p: (2, 0) if tuple(p) == (1, 9) else (p[0], p[1] + 1)  # noqa: E731
    joined = RecentlyJoined(next_position)
    joined.add(B, (2, 0))
    assert not joined.allowed(B, (2, 0), (1, 8))
    assert joined.allowed(B, (2, 0), (1, 9))
    assert joined.prune((1, 9)) == [B]


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4)), max_size=40),
    st.lists(st.integers(-2, 6), min_size=3, max_size=3),
    st.sets(st.integers(0, 7), max_size=3),
)
def test_assign_entries_properties(keys_and_sizes, permit_list, held):
    consumers = ["c0", "c1", "c2"]
    ring = ConsistentHashingSelector(5)
    for c in consumers:
        ring.add_consumer(c, name=c)
    batch = [Entry((1, i), k * 9000, n) for i, (k, n) in enumerate(keys_and_sizes)]
    permits = dict(zip(consumers, permit_list))
    result = assign_entries(batch, ring, permits, held_key_hashes={h * 9000 for h in held})
    sent = [e for es in result.by_consumer.values() for e in es]
    # every entry exactly once
    assert sorted(e.position for e in sent + result.replay_later) == [e.position for e in batch]
    # a key never goes to two consumers, and what is sent of a key is a prefix of its entries
    for key in {e.key_hash for e in batch}:
        of_key = [e for e in batch if e.key_hash == key]
        owners = {c for c, es in result.by_consumer.items() for e in es if e.key_hash == key}
        assert len(owners) <= 1
        sent_of_key = [e for e in of_key if e in sent]
        assert of_key[: len(sent_of_key)] == sent_of_key
        if key in {h * 9000 for h in held}:
            assert not sent_of_key
    # each consumer received entries only while it had a permit left
    for c, es in result.by_consumer.items():
        assert sum(e.num_messages for e in es[:-1]) < permits[c]
        assert es == sorted(es, key=lambda e: e.position)
