"""Offsets: one message id per topic-partition, and the pure rules over them.

Spark stores a source's offsets as JSON. Ours map each topic-partition to
``"ledger:entry:batchIndex:batchSize"``. A range is *(start, end]*: start
exclusive, end inclusive. A batch index of -1 stands for the whole entry (a
message sent without batching, or every message of a batch), so an offset
read from the broker's last message id covers its whole entry.

The rules here take plain values (ledger lists, positions) and are tested
from tables: where a range splits into tasks, and whether a range starts in
data that retention has already deleted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from magnetar.topic_name import parse_topic

_WHOLE = math.inf  # sorts after every batch index of its entry


class Offset(NamedTuple):
    ledger: int
    entry: int
    batch_index: int = -1
    batch_size: int = 0  # known when the offset came from a read message; needed to ack part of a batch

    @property
    def is_earliest(self) -> bool:
        return self.ledger < 0

    def bound(self) -> tuple:
        """Where this offset sits among message keys: everything of its entry up to and including it."""
        return (self.ledger, self.entry, _WHOLE if self.batch_index < 0 else self.batch_index)

    def covers_whole_entry(self) -> bool:
        return self.batch_index < 0 or (self.batch_size > 0 and self.batch_index >= self.batch_size - 1)

    def encode(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch_index}:{self.batch_size}"


EARLIEST = Offset(-1, -1, -1, 0)


def message_key(ledger: int, entry: int, batch_index: int) -> tuple:
    return (ledger, entry, max(batch_index, 0))


def in_range(key: tuple, start: Offset, end: Offset) -> bool:
    return start.bound() < key <= end.bound()


def after(offset: Offset, other: Offset) -> bool:
    return offset.bound() > other.bound()


def parse_offset(value) -> Offset:
    """A stored offset ``"L:E:B:S"``, a user's ``"L:E"`` / ``"L:E:B"``, ``{"ledgerId", "entryId", "batchIndex"}``
    (the admin API's shape) or ``"earliest"``."""
    if value == "earliest":
        return EARLIEST
    if isinstance(value, dict):
        try:
            parts = [value["ledgerId"], value["entryId"], value.get("batchIndex", -1), value.get("batchSize", 0)]
        except KeyError as exc:
            raise ValueError(f"a message id needs {exc.args[0]!r}: {value!r}") from None
    elif isinstance(value, str):
        parts = value.split(":")
    else:
        raise ValueError(f"expected 'ledger:entry[:batchIndex]' or a message id object, got {value!r}")
    try:
        numbers = [int(p) for p in parts]
    except (TypeError, ValueError):
        raise ValueError(f"message id parts must be integers: {value!r}") from None
    if not 2 <= len(numbers) <= 4:
        raise ValueError(f"expected 'ledger:entry[:batchIndex]', got {value!r}")
    offset = Offset(*numbers)
    if offset.ledger < 0 and offset != EARLIEST:
        return EARLIEST if offset.entry < 0 else _bad(value)
    if offset.ledger >= 0 and offset.entry < 0:
        _bad(value)
    return offset


def _bad(value):
    raise ValueError(f"not a message id: {value!r}")


def encode_offsets(offsets: dict[str, Offset]) -> dict[str, str]:
    return {tp: o.encode() for tp, o in sorted(offsets.items())}


def decode_offsets(stored: dict) -> dict[str, Offset]:
    return {tp: parse_offset(v) for tp, v in stored.items()}


def topic_url(name: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; ``t/ns/x`` -> ``persistent://t/ns/x``.
    Raises ValueError (magnetar.topic_name's, with the reason) for a name the broker would refuse, and for a
    non-persistent topic: it has no stored offsets to read from or resume at."""
    topic = parse_topic(name)
    if not topic.persistent:
        raise ValueError(f"invalid topic {name!r}: only persistent topics can be read or written by offset "
                         f"(a non-persistent topic stores nothing)")
    return str(topic)


# ---- rules -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LedgerInfo:
    ledger_id: int
    entries: int


def split_range(start: Offset, end: Offset, ledgers: list[LedgerInfo], max_entries: int) -> list[tuple[Offset, Offset]]:
    """(start, end] cut at ledger ends and every ``max_entries`` entries: the tasks of one topic-partition.

    ``ledgers`` is the topic's ledger list; the last, open ledger may report fewer entries than it holds,
    so the end's own entry bounds its ledger.
    """
    if not after(end, start):
        return []
    cuts: list[Offset] = []
    for info in ledgers:
        if info.ledger_id < start.ledger or info.ledger_id > end.ledger:
            continue
        first = start.entry + 1 if info.ledger_id == start.ledger else 0
        last = end.entry if info.ledger_id == end.ledger else info.entries - 1
        if last < first:
            continue
        cuts.extend(Offset(info.ledger_id, e) for e in range(first - 1 + max_entries, last, max_entries))
        if info.ledger_id != end.ledger:
            cuts.append(Offset(info.ledger_id, last))
    bounds = [start, *[c for c in cuts if after(c, start) and after(end, c)], end]
    return list(zip(bounds, bounds[1:]))


def range_entries(start: Offset, end: Offset, ledgers: list[LedgerInfo]) -> int:
    """How many entries (start, end] touches: what task sizes are measured in."""
    total = 0
    for info in ledgers:
        if start.ledger <= info.ledger_id <= end.ledger:
            first = max(start.entry, 0) if info.ledger_id == start.ledger else 0
            last = end.entry if info.ledger_id == end.ledger else info.entries - 1
            total += max(0, last - first + 1)
    return total


def lost_range(start: Offset, ledgers: list[LedgerInfo], mark_delete: Offset | None) -> tuple[Offset, Offset] | None:
    """The part of the data after ``start`` that retention deleted, as (start, first stored entry), or None.

    Retention deletes whole ledgers, and only ledgers that every subscription has consumed. So nothing after
    ``start`` is gone while our own subscription's mark-delete position is at or before ``start``, nor while
    ``start``'s ledger is still stored. Otherwise the ledger holding ``start`` is gone, and what followed it
    there may be too: Pulsar's connector calls this potential data loss as well.
    """
    if start.is_earliest or not ledgers:
        return None
    # Compared entry by entry: our own cumulative ack of a batch's last message (start, a batch index) leaves the
    # broker's mark-delete on that whole entry, which is not past start -- the rest of that batch does not exist.
    if mark_delete is not None and (mark_delete.ledger, mark_delete.entry) <= (start.ledger, start.entry):
        return None
    ids = [info.ledger_id for info in ledgers]
    if start.ledger in ids or start.ledger > ids[-1]:
        return None
    first = next((info for info in ledgers if info.entries > 0), ledgers[0])
    return start, Offset(first.ledger_id, 0)
