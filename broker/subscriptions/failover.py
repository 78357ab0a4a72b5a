"""Which consumer of a Failover (or Exclusive) subscription is active.

Pulsar's rule: the consumers with the best priority (the *lowest*
``priority_level``) compete; among them, ordered by consumer name (ties in
connection order), the first is active on a non-partitioned topic, and on
partition ``i`` of a partitioned topic the ``i mod n``-th is, so the
partitions spread over the consumers.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

C = TypeVar("C")


def choose_active_consumer(consumers: Sequence[C], partition_index: int) -> C | None:
    """The active consumer among ``consumers`` (in connection order), or None when there are none."""
    if not consumers:
        return None
    best = min(c.priority_level for c in consumers)
    candidates = sorted((c for c in consumers if c.priority_level == best), key=lambda c: c.name)  # stable sort keeps connection order
    if partition_index < 0:
        return candidates[0]
    return candidates[partition_index % len(candidates)]
