"""Producer access modes as a table: who is admitted, who waits, who is refused and why."""

import pytest

from broker.errors import ProducerBusyError, ProducerFencedError
from broker.topics.producer import AccessMode, Producer, Verdict, admit


def producer(name, mode=AccessMode.Shared):
    return Producer(producer_id=hash(name) & 0xFFFF, name=name, connection=None, access_mode=mode)


S, E, W, F = AccessMode.Shared, AccessMode.Exclusive, AccessMode.WaitForExclusive, AccessMode.ExclusiveWithFencing


@pytest.mark.parametrize("mode, existing, verdict, new_epoch", [
    (S, [], Verdict.ADMIT, None),
    (S, [producer("a")], Verdict.ADMIT, None),
    (E, [], Verdict.ADMIT, 1),
    (W, [], Verdict.ADMIT, 1),
    (W, [producer("a", E)], Verdict.WAIT, None),
    (W, [producer("a")], Verdict.WAIT, None),
    (F, [], Verdict.ADMIT, 1),
    (F, [producer("a", E)], Verdict.FENCE_OTHERS, 1),
    (F, [producer("a"), producer("b")], Verdict.FENCE_OTHERS, 1),
])
def test_admission_table(mode, existing, verdict, new_epoch):
    decision = admit(mode, existing, topic_epoch=0, requested_epoch=None)
    assert decision.verdict is verdict and decision.new_epoch == new_epoch


@pytest.mark.parametrize("mode, existing, error, text", [
    (S, [producer("x", E)], ProducerBusyError, "exclusive producer 'x'"),
    (E, [producer("x")], ProducerFencedError, "already has producer 'x'"),
    (E, [producer("x", E)], ProducerFencedError, "Exclusive access refused"),
])
def test_refusals_name_the_holder(mode, existing, error, text):
    with pytest.raises(error, match=text):
        admit(mode, existing, topic_epoch=3, requested_epoch=None)


def test_an_older_epoch_is_fenced():
    with pytest.raises(ProducerFencedError, match="older than the topic's epoch 5"):
        admit(E, [], topic_epoch=5, requested_epoch=4)
    assert admit(E, [], topic_epoch=5, requested_epoch=5).new_epoch == 6
