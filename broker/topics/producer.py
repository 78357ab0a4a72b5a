"""Producers on a topic and the access-mode rules that admit them.

Pulsar's four access modes decide who may publish:

- ``Shared``: any number of producers, unless an exclusive one holds the topic.
- ``Exclusive``: the only producer; refused (ProducerFenced) while any other exists.
- ``ExclusiveWithFencing``: the only producer; existing producers are fenced
  (closed by the broker) to make room.
- ``WaitForExclusive``: queued until the topic has no producer, then admitted
  as exclusive (the client first hears ``producer_ready = false``).

Each exclusive grant bumps the topic epoch, so a producer that reconnects with
an older epoch after being replaced is refused. ``admit`` is the whole rule
as a pure function of the topic's producers; the topic applies its verdict.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field

from broker.errors import ProducerBusyError, ProducerFencedError


class AccessMode(enum.IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3

    @property
    def exclusive(self) -> bool:
        return self is not AccessMode.Shared


class Verdict(enum.Enum):
    ADMIT = "admit"
    FENCE_OTHERS = "fence-others"  # admit after closing every other producer
    WAIT = "wait"  # queue until the topic is free


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    new_epoch: int | None  # set when the grant is exclusive


def admit(mode: AccessMode, existing: Collection["Producer"], topic_epoch: int, requested_epoch: int | None) -> Admission:
    """Decide on a new producer, in O(1). Raises ProducerBusyError / ProducerFencedError with the reason.

    An exclusive producer is always a topic's only one (it is admitted only alone, or fences the others, and a
    shared one is refused beside it), so the first producer tells whether the topic has an exclusive holder."""
    first = next(iter(existing), None)
    exclusive_holder = first if first is not None and first.access_mode.exclusive else None
    if requested_epoch is not None and mode.exclusive and requested_epoch < topic_epoch:
        raise ProducerFencedError(f"producer epoch {requested_epoch} is older than the topic's epoch {topic_epoch}")
    if mode is AccessMode.Shared:
        if exclusive_holder is not None:
            raise ProducerBusyError(f"topic has an exclusive producer {exclusive_holder.name!r}")
        return Admission(Verdict.ADMIT, None)
    if mode is AccessMode.ExclusiveWithFencing:
        return Admission(Verdict.FENCE_OTHERS if existing else Verdict.ADMIT, topic_epoch + 1)
    if not existing:
        return Admission(Verdict.ADMIT, topic_epoch + 1)
    if mode is AccessMode.WaitForExclusive:
        return Admission(Verdict.WAIT, None)
    holder = exclusive_holder or first
    raise ProducerFencedError(f"topic already has producer {holder.name!r}; Exclusive access refused")


@dataclass(eq=False)
class Producer:
    """One producer attached to a topic through a client connection."""

    producer_id: int
    name: str
    connection: object  # broker.server.connection.ServerConnection
    access_mode: AccessMode = AccessMode.Shared
    user_provided_name: bool = False
    epoch: int = 0
    ready: bool = True
    # stats
    msg_in: int = 0
    bytes_in: int = 0
    metadata: dict = field(default_factory=dict)

    def record(self, messages: int, size: int) -> None:
        self.msg_in += messages
        self.bytes_in += size
