"""Key_Shared subscriptions: which consumer owns a key, when a newly joined consumer may get it, how a batch splits.

Keys hash into 0..65535 (``STICKY_KEY_HASH_RANGE``): MurmurHash3 x86_32 of
the key's bytes (the ordering key if set, else the partition key), masked to
31 bits like Pulsar's ``Murmur3_32Hash.makeHash``, modulo 65536. Two
selectors map hashes to consumers:

- ``ConsistentHashingSelector`` (AUTO_SPLIT, the default): each consumer sits
  on a ring at ``points_per_consumer`` points, the hashes of its name followed
  by a counter (``name + str(i)``); a key belongs to the first point at or after
  its hash, wrapping to the first point. Consumers sharing a point (same
  name, or a collision) are ordered by name and split it by ``hash % n``.
  Adding or removing a consumer moves only the keys next to its points.
  Pulsar 2.x/3.x place points and keys on the 31-bit hash; we use the same
  16-bit space for the ring as for STICKY ranges, so one hash serves all.
- ``StickyRangesSelector`` (STICKY): consumers declare inclusive hash ranges;
  an overlap with another consumer's range (or one of its own) is refused.

Ordering when a consumer joins (``RecentlyJoined``, Pulsar's "recently joined
consumers"): keys that move to the newcomer may still have unacknowledged
messages on their previous owner. So a consumer that joins while messages are
out may only receive entries *before* the read position at its arrival,
until every entry before that position is acknowledged (the mark-delete
position reaches it).

``assign_entries`` puts it together for one read batch: entries go to their
key's consumer while it has permits; an entry that cannot go now is returned
for replay, and so is every later entry of the same key in the batch, so a
key's messages never overtake each other.

``select_replay`` decides which waiting entries to read again: only those
whose consumer can take them now. A consumer that stops receiving therefore
holds back its own keys and nobody else's: the dispatcher reads past its
waiting entries (up to a look-ahead limit) and serves the other consumers,
instead of re-reading the same unsendable entries at the head of the queue.

``KeySharedDispatcher`` (the I/O, at the end of this module) is the Shared
dispatcher with these rules: an entry whose key already has older entries
waiting for replay waits too, and a recently joined consumer only receives
entries older than its arrival until the mark-delete position passes them.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, Mapping, Protocol, Sequence, TypeVar

from broker.errors import ConsumerAssignError, ConsumerBusyError
from broker.subscriptions.consumer import Consumer, DispatchedEntry
from broker.subscriptions.dispatcher import now_ms
from broker.subscriptions.shared import SharedDispatcher
from storage.managed_ledger import Position as LedgerPosition

STICKY_KEY_HASH_RANGE = 65536  # Pulsar's StickyKeyConsumerSelector range size (2 << 15)
HASH_RANGE = STICKY_KEY_HASH_RANGE  # older name, kept for importers
DEFAULT_POINTS_PER_CONSUMER = 100  # Pulsar's subscriptionKeySharedConsistentHashingReplicaPoints

Position = tuple  # (ledger_id, entry_id); any 2-tuple, e.g. storage.managed_ledger.Position
C = TypeVar("C", bound=Hashable)
E = TypeVar("E")

_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _mix_k(k: int) -> int:
    k = (k * _C1) & _MASK
    k = ((k << 15) | (k >> 17)) & _MASK
    return (k * _C2) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data``, as an unsigned 32-bit int."""
    h = seed & _MASK
    n = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: n * 4]):
        h ^= _mix_k(k)
        h = ((h << 13) | (h >> 19)) & _MASK
        h = (h * 5 + 0xE6546B64) & _MASK
    tail = data[n * 4:]
    if tail:
        h ^= _mix_k(int.from_bytes(tail, "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def sticky_key_hash(key: bytes) -> int:
    """The hash (0..65535) that decides a key's consumer."""
    return (murmur3_32(key) & 0x7FFFFFFF) % STICKY_KEY_HASH_RANGE


def _name_of(consumer, name: str | None) -> str:
    if name is not None:
        return name
    return getattr(consumer, "name", None) or str(consumer)


# ---- AUTO_SPLIT: consistent hashing ----------------------------------------------------


class ConsistentHashingSelector(Generic[C]):
    """The hash ring of an AUTO_SPLIT Key_Shared subscription.

    Consumers are any hashable handles (the broker's Consumer objects, or ids);
    ``name`` defaults to ``consumer.name``.
    """

    def __init__(self, points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER):
        if points_per_consumer < 1:
            raise ValueError("points_per_consumer must be >= 1")
        self.points_per_consumer = points_per_consumer
        self._points: list[int] = []  # sorted ring points
        self._owners: dict[int, list[tuple[str, C]]] = {}  # point -> (name, consumer), sorted by name
        self._names: dict[C, str] = {}

    def _consumer_points(self, name: str) -> set[int]:
        return {sticky_key_hash(f"{name}{i}".encode()) for i in range(self.points_per_consumer)}

    def add_consumer(self, consumer: C, name: str | None = None) -> None:
        """Place ``consumer`` on the ring; adding it twice is a no-op."""
        if consumer in self._names:
            return
        name = _name_of(consumer, name)
        self._names[consumer] = name
        for point in self._consumer_points(name):
            owners = self._owners.get(point)
            if owners is None:
                self._owners[point] = [(name, consumer)]
                bisect.insort(self._points, point)
            else:
                # insertion after equal names keeps connection order among namesakes
                keys = [n for n, _ in owners]
                owners.insert(bisect.bisect_right(keys, name), (name, consumer))

    def remove_consumer(self, consumer: C) -> None:
        name = self._names.pop(consumer, None)
        if name is None:
            return
        for point in self._consumer_points(name):
            owners = [o for o in self._owners[point] if o[1] is not consumer and o[1] != consumer]
            if owners:
                self._owners[point] = owners
            else:
                del self._owners[point]
                del self._points[bisect.bisect_left(self._points, point)]

    def select(self, key_hash: int) -> C | None:
        """The consumer owning ``key_hash``; None when the ring is empty."""
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, key_hash)
        owners = self._owners[self._points[i % len(self._points)]]
        return owners[key_hash % len(owners)][1]

    def consumer_ranges(self) -> dict[C, list[tuple[int, int]]]:
        """consumer -> inclusive (start, end) hash ranges it owns, for stats; a shared point lists all its owners."""
        out: dict[C, list[tuple[int, int]]] = {}
        prev = -1
        for point in self._points:
            for _, consumer in self._owners[point]:
                out.setdefault(consumer, []).append((prev + 1, point))
            prev = point
        if self._points and prev < STICKY_KEY_HASH_RANGE - 1:
            for _, consumer in self._owners[self._points[0]]:
                out.setdefault(consumer, []).append((prev + 1, STICKY_KEY_HASH_RANGE - 1))
        return out

    def __len__(self) -> int:
        return len(self._names)


# ---- STICKY: consumer-declared ranges ----------------------------------------------------


class StickyRangesSelector(Generic[C]):
    """Hash ranges declared by STICKY Key_Shared consumers; a hash nobody declared has no consumer."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, C]] = []  # sorted by start, never overlapping
        self._names: dict[C, str] = {}

    def add_consumer(self, consumer: C, ranges: Iterable[tuple[int, int]], name: str | None = None) -> None:
        """Claim inclusive ``(start, end)`` ranges for ``consumer``.

        Raises ConsumerAssignError for no ranges, an inverted or out-of-range
        range, or one that overlaps a range already claimed (by anyone, the
        same consumer included); nothing is claimed then.
        """
        ranges = sorted((int(s), int(e)) for s, e in ranges)
        if not ranges:
            raise ConsumerAssignError("a STICKY Key_Shared consumer must declare at least one hash range")
        for start, end in ranges:
            if start > end:
                raise ConsumerAssignError(f"hash range [{start}, {end}] has start > end")
            if not 0 <= start <= end < STICKY_KEY_HASH_RANGE:
                raise ConsumerAssignError(f"hash range [{start}, {end}] is not within 0..{STICKY_KEY_HASH_RANGE - 1}")
        for (s1, e1), (s2, e2) in zip(ranges, ranges[1:]):
            if s2 <= e1:
                raise ConsumerAssignError(f"hash range [{s2}, {e2}] overlaps [{s1}, {e1}] of the same consumer")
        for start, end in ranges:
            clash = self._overlapping(start, end)
            if clash is not None:
                s, e, owner = clash
                raise ConsumerAssignError(
                    f"hash range [{start}, {end}] overlaps [{s}, {e}] of consumer {self._names[owner]!r}")
        self._names[consumer] = _name_of(consumer, name)
        for start, end in ranges:
            i = bisect.bisect_left(self._starts, start)
            self._starts.insert(i, start)
            self._ranges.insert(i, (start, end, consumer))

    def _overlapping(self, start: int, end: int):
        i = bisect.bisect_right(self._starts, end) - 1  # the last range starting at or before ``end``
        if i >= 0 and self._ranges[i][1] >= start:
            return self._ranges[i]
        return None

    def remove_consumer(self, consumer: C) -> None:
        if self._names.pop(consumer, None) is None:
            return
        kept = [r for r in self._ranges if r[2] is not consumer and r[2] != consumer]
        self._ranges = kept
        self._starts = [r[0] for r in kept]

    def select(self, key_hash: int) -> C | None:
        slot = key_hash % STICKY_KEY_HASH_RANGE
        i = bisect.bisect_right(self._starts, slot) - 1
        if i >= 0 and self._ranges[i][1] >= slot:
            return self._ranges[i][2]
        return None

    def consumer_ranges(self) -> dict[C, list[tuple[int, int]]]:
        out: dict[C, list[tuple[int, int]]] = {}
        for start, end, consumer in self._ranges:
            out.setdefault(consumer, []).append((start, end))
        return out

    def __len__(self) -> int:
        return len(self._names)


# ---- ordering for consumers that join while messages are out ------------------------------


def _next_in_ledger(position: Position) -> Position:
    return (position[0], position[1] + 1)


def joins_as_recent(consumer_count_before: int, entries_since_first_unacked: int, allow_out_of_order: bool) -> bool:
    """Whether a joining consumer must wait for older messages (Pulsar's condition).

    Not when it asked for out-of-order delivery, when it is the only consumer,
    or when at most one entry separates the first unacked entry from the read
    position (nothing is out that could be reordered).
    """
    return not allow_out_of_order and consumer_count_before >= 1 and entries_since_first_unacked > 1


class RecentlyJoined(Generic[C]):
    """Consumers that joined while messages were out, each with the read position at its arrival.

    ``next_position(mark_delete)`` gives the position after the mark-delete
    position; the default stays within the ledger, so when a consumer joined
    at the first entry of a new ledger it waits one ack longer than needed
    (safe: it only delays). Pass the managed ledger's next-valid-position to
    be exact.
    """

    def __init__(self, next_position: Callable[[Position], Position] = _next_in_ledger):
        self._next_position = next_position
        self._joined: dict[C, Position] = {}  # in arrival order

    def add(self, consumer: C, read_position: Position) -> None:
        self._joined[consumer] = tuple(read_position)

    def remove(self, consumer: C) -> None:
        self._joined.pop(consumer, None)

    def limit_for(self, consumer: C) -> Position | None:
        """The position ``consumer`` may not reach yet; None when it is unrestricted."""
        return self._joined.get(consumer)

    def _caught_up(self, limit: Position, mark_delete_position: Position) -> bool:
        return limit <= tuple(self._next_position(tuple(mark_delete_position)))

    def allowed(self, consumer: C, position: Position, mark_delete_position: Position, *, replay: bool = False) -> bool:
        """May ``consumer`` receive the entry at ``position`` now?

        A recently joined consumer only receives entries before its limit,
        until everything before the limit is acknowledged. For a replay read
        the limit is also capped by the earliest newcomer's limit, as in
        Pulsar: replayed entries were held back for someone older.
        """
        limit = self._joined.get(consumer)
        if limit is None or self._caught_up(limit, mark_delete_position):
            return True
        if replay:
            limit = min(limit, min(self._joined.values()))
        return tuple(position) < limit

    def prune(self, mark_delete_position: Position) -> list[C]:
        """Forget the consumers that caught up with ``mark_delete_position``; returns them."""
        gone = [c for c, limit in self._joined.items() if self._caught_up(limit, mark_delete_position)]
        for c in gone:
            del self._joined[c]
        return gone

    def __contains__(self, consumer) -> bool:
        return consumer in self._joined

    def __len__(self) -> int:
        return len(self._joined)


# ---- splitting one read batch -------------------------------------------------------------


class KeyedEntry(Protocol):
    position: Position
    key_hash: int
    num_messages: int


class Selector(Protocol[C]):
    def select(self, key_hash: int) -> C | None: ...


@dataclass
class KeySharedAssignment(Generic[C, E]):
    """Where each entry of a batch goes: per consumer (in batch order) or back to the replay queue."""

    by_consumer: dict[C, list[E]] = field(default_factory=dict)
    replay_later: list[E] = field(default_factory=list)


def _may_take(consumer, position, budget, recently_joined, mark_delete_position, replay) -> bool:
    if consumer is None or budget.get(consumer, 0) <= 0:
        return False
    if recently_joined is None or mark_delete_position is None:
        return True
    return recently_joined.allowed(consumer, position, mark_delete_position, replay=replay)


def assign_entries(
    entries: Sequence[E],
    selector: Selector[C],
    permits: Mapping[C, int],
    *,
    recently_joined: RecentlyJoined[C] | None = None,
    mark_delete_position: Position | None = None,
    held_key_hashes: Iterable[int] = (),
    waiting_since: Mapping[int, Position] | None = None,
    replay: bool = False,
) -> KeySharedAssignment[C, E]:
    """Split ``entries`` (in position order, each with ``key_hash`` and ``num_messages``) among consumers.

    An entry goes to ``selector.select(key_hash)`` when that consumer has
    permits left (``permits``, in messages; a batch may overdraw the last
    permit, as a Shared consumer's may), no older entry of its key waits for
    replay (``held_key_hashes``: keys held whatever the position;
    ``waiting_since``: key hash -> the oldest waiting position of that key)
    and, for a recently joined consumer, the entry is before its limit.
    Otherwise the entry and every later entry of its key go to ``replay_later``.
    """
    out: KeySharedAssignment[C, E] = KeySharedAssignment()
    held = set(held_key_hashes)
    waiting = waiting_since or {}
    budget = dict(permits)
    for entry in entries:
        key_hash = entry.key_hash
        older = waiting.get(key_hash)
        blocked = key_hash in held or (older is not None and tuple(older) < tuple(entry.position))
        consumer = None if blocked else selector.select(key_hash)
        if not _may_take(consumer, entry.position, budget, recently_joined, mark_delete_position, replay):
            # Hold the key: its later entries must not overtake this one. (Permits and
            # the join limit only tighten along a batch, but the guarantee should not
            # depend on that.)
            held.add(key_hash)
            out.replay_later.append(entry)
            continue
        budget[consumer] -= max(entry.num_messages, 1)
        out.by_consumer.setdefault(consumer, []).append(entry)
    return out


def select_replay(
    waiting: Iterable[tuple[Position, int | None]],
    selector: Selector[C],
    permits: Mapping[C, int],
    count: int,
    *,
    recently_joined: RecentlyJoined[C] | None = None,
    mark_delete_position: Position | None = None,
) -> list[Position]:
    """The waiting positions to read again now: at most ``count``, lowest first.

    ``waiting`` is (position, key hash or None when unknown) in position
    order. A position whose key is unknown is always read (its key is learned
    from the entry). Otherwise a position is read when its key's consumer has
    permits left (one per entry here: the batch sizes are not known until the
    read) and may take it; once one position of a key stays, every later one
    of that key stays too.
    """
    out: list[Position] = []
    blocked: set[int] = set()
    budget = dict(permits)
    for position, key_hash in waiting:
        if len(out) >= count:
            break
        if key_hash is None:
            out.append(position)
            continue
        if key_hash in blocked:
            continue
        consumer = selector.select(key_hash)
        if not _may_take(consumer, position, budget, recently_joined, mark_delete_position, True):
            blocked.add(key_hash)
            continue
        budget[consumer] -= 1
        out.append(position)
    return out


# ---- the dispatcher: I/O around the rules above ----------------------------------------------------------

NONE_KEY = b"NONE_KEY"


class KeySharedDispatcher(SharedDispatcher):
    """Key_Shared: each key to one consumer; entries a busy consumer cannot take wait in the replay queue.

    Reading: waiting entries whose consumer can take them now come first
    (``select_replay``); when none can, new entries are read from the cursor so
    the other consumers keep receiving, until the replay queue holds
    ``look_ahead_limit()`` entries (Pulsar's look-ahead thresholds). The replay
    queue knows each waiting entry's key hash, so a newer entry of a key never
    overtakes an older one, whoever holds it.
    """

    def __init__(self, subscription, max_read_batch_size: int = 100, *, delayed_delivery: bool = True,
                 points_per_consumer: int = 100, clock=now_ms, look_ahead_per_consumer: int = 2000,
                 look_ahead_per_subscription: int = 20_000):
        super().__init__(subscription, max_read_batch_size, delayed_delivery=delayed_delivery, clock=clock)
        self.points_per_consumer = points_per_consumer
        self.look_ahead_per_consumer = look_ahead_per_consumer
        self.look_ahead_per_subscription = look_ahead_per_subscription
        self.selector = None
        ml = self.cursor.ml
        self.recently_joined = RecentlyJoined(lambda p: ml.position_after(LedgerPosition(*p)))
        self._released_hashes: dict[tuple, int] = {}  # key hashes of positions a consumer gave back
        self._reading_replay = False

    def key_hash_of(self):
        def of(md) -> int:
            if md.HasField("ordering_key"):
                key = md.ordering_key
            elif md.HasField("partition_key"):
                key = md.partition_key.encode()
            else:
                key = NONE_KEY
            return sticky_key_hash(key)
        return of

    def look_ahead_limit(self) -> int:
        return min(self.look_ahead_per_consumer * max(len(self.consumers), 1), self.look_ahead_per_subscription)

    # ---- consumers -----------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        sticky = meta is not None and meta.keySharedMode == 1  # KeySharedMode.STICKY
        if self.selector is not None and isinstance(self.selector, StickyRangesSelector) != sticky:
            # One mode per subscription, as in Pulsar: refused while consumers of the other mode are connected;
            # once none is, the subscription takes the newcomer's mode.
            if self.consumers:
                modes = ("STICKY", "AUTO_SPLIT") if sticky else ("AUTO_SPLIT", "STICKY")
                raise ConsumerBusyError(f"a Key_Shared {modes[0]} consumer cannot join a subscription whose "
                                        f"consumers are {modes[1]}")
            self.selector = None
        if self.selector is None:
            self.selector = StickyRangesSelector() if sticky else ConsistentHashingSelector(self.points_per_consumer)
        if sticky:
            self.selector.add_consumer(consumer, [(r.start, r.end) for r in meta.hashRanges])
        else:
            self.selector.add_consumer(consumer)
        if self.consumers and not (meta is not None and meta.allowOutOfOrderDelivery):
            self.recently_joined.add(consumer, tuple(self.cursor.ml.normalize(self.cursor.read_position)))
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> list:
        if self.selector is not None:
            self.selector.remove_consumer(consumer)
        self.recently_joined.remove(consumer)
        self._remember_hashes(consumer, consumer.pending.positions())
        return super().remove_consumer(consumer)

    def _remember_hashes(self, consumer: Consumer, positions) -> None:
        for p in positions:
            key_hash = consumer.pending.key_hash(p)
            if key_hash is not None:
                self._released_hashes[tuple(p)] = key_hash

    def on_ack(self) -> None:
        self.recently_joined.prune(tuple(self.cursor.mark_delete_position))
        super().on_ack()

    def forget_queued(self) -> None:
        super().forget_queued()
        self._released_hashes.clear()

    # ---- reading -------------------------------------------------------------

    def _budgets(self) -> dict:
        return {c: c.permits if c.can_take() else 0 for c in self.consumers}

    async def read(self, count: int):
        positions = []
        if len(self.replay) and self.selector is not None:
            positions = select_replay(self.replay.items(), self.selector, self._budgets(), count,
                                      recently_joined=self.recently_joined,
                                      mark_delete_position=tuple(self.cursor.mark_delete_position))
        if positions:
            for p in positions:
                self.replay.discard(p)
            self._reading_replay = True
            await self.reserve_read(len(positions))
            return await self.subscription.read_positions(positions)
        self._reading_replay = False
        if len(self.replay) >= self.look_ahead_limit():
            await self._wakeup.wait()  # full: wait until permits or acks let waiting entries go
            return None
        return await self.read_tail(count)

    def dispatch(self, entries) -> bool:
        from_replay, self._reading_replay = self._reading_replay, False
        out = self.hold_delayed(self.entries_to_send(entries, self.key_hash_of()))
        if not out:
            return bool(entries)
        sent = self._assign(out, from_replay)
        # New entries that only moved to the replay queue are progress too: read on for the other consumers.
        return sent or (not from_replay and len(self.replay) < self.look_ahead_limit())

    def hand_out(self, out: list[DispatchedEntry]) -> bool:
        return self._assign(out, True)

    def _assign(self, out: list[DispatchedEntry], from_replay: bool) -> bool:
        if self.selector is None or not self.consumers:
            for e in out:
                self.replay.add(e.position, e.key_hash)
            return False
        result = assign_entries(out, self.selector, self._budgets(), recently_joined=self.recently_joined,
                                mark_delete_position=tuple(self.cursor.mark_delete_position),
                                waiting_since=self.replay.earliest_by_key_hash(), replay=from_replay)
        for consumer, entries in result.by_consumer.items():
            consumer.deliver(entries)
            self.subscription.record_out(entries)
        for e in result.replay_later:
            self.replay.add(e.position, e.key_hash)
        return bool(result.by_consumer)

    # ---- redelivery ----------------------------------------------------------

    async def redeliver(self, consumer: Consumer, positions: list | None) -> None:
        self._remember_hashes(consumer, consumer.pending.positions() if positions is None else positions)
        await super().redeliver(consumer, positions)

    async def redeliver_released(self, positions) -> None:
        for p in positions:
            key = tuple(p)
            self.redelivery.increment(key)
            self.replay.add(key, self._released_hashes.pop(key, None))
        self.wake()
