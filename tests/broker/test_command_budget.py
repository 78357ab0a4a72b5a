"""The per-connection command budget (broker.server.command_budget): pure, with an injected clock."""

import pytest

from broker.server.command_budget import CommandBudget, TokenBucket
from magnetar.protocol import pulsar_api_pb2 as pb

T = pb.BaseCommand


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("rate, burst, taken, elapsed, wait", [
    (10, 10, 10, 0.0, 0.0),     # the burst is free
    (10, 10, 11, 0.0, 0.1),     # one beyond it: a tenth of a second
    (10, 10, 30, 0.0, 2.0),     # debt is paid at the rate
    (10, 10, 30, 1.5, 0.5),     # time passing pays it
    (10, 10, 5, 100.0, 0.0),    # idle time saves no more than the burst
])
def test_token_bucket_waits_for_debt_to_be_paid(rate, burst, taken, elapsed, wait):
    clock = Clock()
    bucket = TokenBucket(rate, burst, clock)
    bucket.take(taken)
    clock.now += elapsed
    assert bucket.wait_s() == pytest.approx(wait)


def test_idle_time_saves_at_most_the_burst():
    clock = Clock()
    bucket = TokenBucket(10, 10, clock)
    clock.now += 1000
    bucket.take(11)
    assert bucket.wait_s() == pytest.approx(0.1)


def test_token_bucket_refuses_nonsense():
    with pytest.raises(ValueError):
        TokenBucket(0, 10)


def test_data_commands_are_free_and_control_commands_are_counted():
    clock = Clock()
    budget = CommandBudget(control_per_s=100, wasted_per_s=100, clock=clock)
    for _ in range(10_000):
        budget.command(T.SEND)
        budget.command(T.ACK)
        budget.command(T.FLOW)
    assert budget.wait_s() == 0.0
    for _ in range(150):
        budget.command(T.PRODUCER)
    assert budget.wait_s() == pytest.approx(0.5)


def test_wasted_work_has_its_own_burst():
    clock = Clock()
    budget = CommandBudget(control_per_s=100, wasted_per_s=1000, clock=clock)
    budget.wasted(1_000)
    assert budget.wait_s() == 0.0
    budget.wasted(2_000)
    assert budget.wait_s() == pytest.approx(2.0)
    assert budget.wasted_total == 3_000


def test_zero_rate_turns_a_bucket_off():
    budget = CommandBudget(control_per_s=0, wasted_per_s=0, clock=Clock())
    for _ in range(100_000):
        budget.command(T.LOOKUP)
    budget.wasted(10**9)
    assert budget.wait_s() == 0.0


@pytest.mark.parametrize("rate, burst, creates, wait", [
    (200, 1000, 1000, 0.0),      # a producer on each of 500 partitions (a LOOKUP and a PRODUCER each): free
    (200, 1000, 1200, 1.0),      # beyond the burst, the steady rate
    (200, 1000, 11_000, 50.0),   # the bench's 10,000 creates on one connection: most of a minute
    (100, None, 100, 0.0),       # no burst given: one second of the rate
    (100, None, 150, 0.5),
])
def test_control_burst_is_set_apart_from_its_rate(rate, burst, creates, wait):
    budget = CommandBudget(control_per_s=rate, wasted_per_s=0, control_burst=burst, clock=Clock())
    for _ in range(creates):
        budget.command(T.PRODUCER)
    assert budget.wait_s() == pytest.approx(wait)


@pytest.mark.parametrize("rate, acks, elapsed, wait", [
    (10_000, 10_000, 0.0, 0.0),   # a reconnected consumer acking its receiver queue and unacked messages: free
    (10_000, 11_000, 0.0, 0.1),
    (10_000, 60_000, 0.0, 5.0),   # the ACK bomb's first 60 frames of 1,000 ids
    (10_000, 60_000, 2.0, 3.0),
    (0, 10**9, 0.0, 0.0),         # off
])
def test_acks_of_entries_not_dispatched_are_paced(rate, acks, elapsed, wait):
    clock = Clock()
    budget = CommandBudget(control_per_s=0, wasted_per_s=0, undispatched_acks_per_s=rate, clock=clock)
    budget.undispatched_acks(acks)
    clock.now += elapsed
    assert budget.wait_s() == pytest.approx(wait)
    assert budget.undispatched_acks_total == acks
