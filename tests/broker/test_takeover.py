"""The take-over verdict as a table: only proof of death removes an owner before its session expires."""

from __future__ import annotations

import pytest

from broker.ownership.takeover import OwnerEvidence, Verdict, takeover_verdict

HOLD_S = 30.0
NOW = 1000.0


def _evidence(same_session=False, same_broker_id=False, owns_address=True, refused=False) -> OwnerEvidence:
    return OwnerEvidence(same_session, same_broker_id, owns_address, refused)


@pytest.mark.parametrize("evidence, lost_at, verdict", [
    # our own session's node: nothing to decide
    (_evidence(same_session=True), None, Verdict.OURS),
    (_evidence(same_session=True, same_broker_id=True), None, Verdict.OURS),
    # another broker that accepts a connection (or whose probe timed out: paused, partitioned) keeps the bundle
    (_evidence(), None, Verdict.LIVE),
    (_evidence(), NOW - 1, Verdict.LIVE),
    # every advertised port refused: dead, taken over at once
    (_evidence(refused=True), None, Verdict.TAKE_OVER),
    (_evidence(refused=True), NOW - HOLD_S, Verdict.TAKE_OVER),  # the hold-down is over
    # ... unless another broker took one of ours within the hold-down: no striking back, wait for expiry
    (_evidence(refused=True), NOW - 1, Verdict.WAIT_FOR_EXPIRY),
    (_evidence(refused=True), NOW - HOLD_S + 0.1, Verdict.WAIT_FOR_EXPIRY),
    # our own id under another session: a previous incarnation, gone if we hold its address
    (_evidence(same_broker_id=True), None, Verdict.TAKE_OVER),
    (_evidence(same_broker_id=True), NOW - 1, Verdict.TAKE_OVER),  # our port is the proof, hold-down or not
    (_evidence(same_broker_id=True, owns_address=False), None, Verdict.WAIT_FOR_EXPIRY),
    (_evidence(same_broker_id=True, owns_address=False, refused=True), None, Verdict.WAIT_FOR_EXPIRY),
])
def test_takeover_verdict(evidence, lost_at, verdict):
    assert takeover_verdict(evidence, NOW, lost_at, HOLD_S) is verdict
