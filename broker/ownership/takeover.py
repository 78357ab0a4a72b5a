"""Whether a bundle's recorded owner may lose its ownership node before its metadata session expires.

How it works: a broker owns a bundle through an ephemeral node that lives as long as the broker's session, so a
killed owner holds its bundles for the whole session timeout (30 s by default). A broker that needs the bundle
(a lookup of one of its topics) may delete that node at once, with a conditional delete on the version it read
from the same owner session, when it has *proof* that the owner's process is gone:

* every advertised port of the owner (Pulsar and HTTP) refuses a connection: the owner's host answered, and
  nothing listens there any more. A paused (SIGSTOP), overloaded or partitioned owner is not dead by this test:
  its kernel still accepts connections into the listen backlog, or the probe times out, and a timeout proves
  nothing. Those owners lose their bundles only when their session expires;
* the node names this broker's own id (host:port) under another session, and this process listens on that
  address: the node is a previous incarnation's (killed and restarted within its session timeout), and two
  processes cannot listen on one address.

Safety never rests on this verdict. A new owner fences the topic's last ledger before it writes, and every
metadata update is conditional, so an owner wrongly judged dead can neither acknowledge another write nor
have anything it wrote afterwards read. The verdict only decides liveness, and it is guarded against flapping:
an owner that finds its node deleted while its session lives stops serving the bundle at once (its topics are
unloaded; clients look them up again), and for ``hold_s`` afterwards it takes no bundle over by probe, so two
brokers that refuse each other's connections cannot trade a bundle back and forth; they wait for expiry instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    OURS = "ours"                        # this session's own node
    LIVE = "live"                        # not proven dead: the owner keeps the bundle
    TAKE_OVER = "take-over"              # proven dead: delete its node now
    WAIT_FOR_EXPIRY = "wait-for-expiry"  # let the node go with its session


@dataclass(frozen=True)
class OwnerEvidence:
    """What a broker knows about the session that holds a bundle's node."""

    same_session: bool     # the node is held by our own session
    same_broker_id: bool   # the node names our broker id
    owns_address: bool     # this process listens on the address our broker id names
    refused: bool          # every advertised port of the recorded owner refused a connection just now


def takeover_verdict(evidence: OwnerEvidence, now: float, lost_to_takeover_at: float | None, hold_s: float) -> Verdict:
    """The verdict on one bundle node; ``lost_to_takeover_at`` is when another broker last took one of ours."""
    if evidence.same_session:
        return Verdict.OURS
    if evidence.same_broker_id:
        # A previous incarnation: our listening on its address is the proof, whatever anyone else concluded.
        return Verdict.TAKE_OVER if evidence.owns_address else Verdict.WAIT_FOR_EXPIRY
    if not evidence.refused:
        return Verdict.LIVE
    if lost_to_takeover_at is not None and now - lost_to_takeover_at < hold_s:
        return Verdict.WAIT_FOR_EXPIRY
    return Verdict.TAKE_OVER
