"""One ACK applied a slice of ids per turn of the event loop (broker.server.acks): the slicing from a table, and
the handler driven turn by turn with a recording subscription -- the first slice at once, one slice per later
turn, the connection's next frames held until the last, one durable write for the whole ACK, and the rest of
the ACK applied at once when the connection closes halfway."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.server import acks
from broker.server.command_budget import CommandBudget
from broker.server.tasks import CommandTasks
from broker.subscriptions.pending_acks import PendingAcks
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command

T = pb.BaseCommand


@pytest.mark.parametrize("count, per_turn, expected", [
    (1, 100, [(0, 1)]),
    (100, 100, [(0, 100)]),
    (101, 100, [(0, 100), (100, 101)]),
    (1000, 100, [(lo, lo + 100) for lo in range(0, 1000, 100)]),
    (10_000, 100, [(lo, lo + 100) for lo in range(0, 10_000, 100)]),  # MAX_ACK_MESSAGE_IDS: 100 turns
    (5, 2, [(0, 2), (2, 4), (4, 5)]),
    (0, 100, []),
])
def test_the_slices_an_ack_is_applied_in(count, per_turn, expected):
    assert acks.slices(count, per_turn) == expected


def test_slices_refuse_a_non_positive_size():
    with pytest.raises(ValueError):
        acks.slices(10, 0)


class Transport:
    def __init__(self):
        self.reading = True

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True


class Subscription:
    """Records what the handler applies and when; the cursor knows every position."""

    def __init__(self):
        self.applied: list[list[int]] = []  # entry ids of each ack_individual_now call
        self.writes = 0
        self.cursor = SimpleNamespace(exists=lambda position: True)

    def ack_individual_now(self, consumer, ids):
        self.applied.append([position.entry_id for position, _, _ in ids])

    async def acks_applied(self, *, receipt=False):
        self.writes += 1


def connection():
    conn = SimpleNamespace(closed=False, remote_address="test", transport=Transport(), written=[], handled_frames=0)
    conn.budget = CommandBudget(0, 0)
    conn.tasks = CommandTasks(conn)
    conn.write = lambda type_, **fields: conn.written.append(type_)
    conn.handle_frames = lambda: setattr(conn, "handled_frames", conn.handled_frames + 1)
    return conn


def ack_frame(count: int, request_id: int | None = 7):
    ids = [pb.MessageIdData(ledgerId=3, entryId=e) for e in range(count)]
    fields = {} if request_id is None else {"request_id": request_id}
    return SimpleNamespace(command=command(T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual,
                                                                     message_id=ids, **fields)))


async def turn():
    await asyncio.sleep(0)  # one turn of the loop: the handler's task runs one step


async def test_a_large_ack_is_applied_a_slice_per_turn_with_the_connections_next_frames_held():
    conn, subscription = connection(), Subscription()
    binding = SimpleNamespace(consumer=SimpleNamespace(pending=PendingAcks()), subscription=subscription)
    acks.on_ack(conn, ack_frame(350), binding)
    assert subscription.applied == [list(range(0, 100))]  # the first slice before the handler returns
    assert conn.tasks.holding_frames and not conn.transport.reading
    seen = [1]
    while len(subscription.applied) < 4:
        assert conn.tasks.holding_frames and not conn.transport.reading  # until the last slice
        await turn()
        seen.append(len(subscription.applied))
        assert len(seen) < 20, seen
    assert all(b - a <= 1 for a, b in zip(seen, seen[1:])), seen  # never two slices in one turn
    assert [ids[0] for ids in subscription.applied] == [0, 100, 200, 300]
    assert sum(map(len, subscription.applied)) == 350 and subscription.applied[-1][-1] == 349
    assert not conn.tasks.holding_frames and conn.transport.reading  # the next frames go on, after the last slice
    while T.ACK_RESPONSE not in conn.written:
        await turn()
    assert subscription.writes == 1  # one durable write for the whole ACK, and its receipt after it
    assert conn.tasks.pending_ack_ids == 0
    assert conn.budget.undispatched_acks_total == 350  # none of them was sent to this consumer: all paced
    await turn()
    assert conn.handled_frames >= 1  # the frames held meanwhile are handled


async def test_an_ack_within_one_slice_never_holds_the_connection():
    conn, subscription = connection(), Subscription()
    binding = SimpleNamespace(consumer=SimpleNamespace(pending=PendingAcks()), subscription=subscription)
    acks.on_ack(conn, ack_frame(100, request_id=None), binding)
    assert subscription.applied == [list(range(100))] and not conn.tasks.holding_frames and conn.transport.reading
    while subscription.writes == 0:
        await turn()
    assert conn.written == []  # no request id: no receipt


async def test_when_the_connection_closes_halfway_the_rest_of_the_ack_is_applied_at_once():
    conn, subscription = connection(), Subscription()
    binding = SimpleNamespace(consumer=SimpleNamespace(pending=PendingAcks()), subscription=subscription)
    acks.on_ack(conn, ack_frame(1000, request_id=None), binding)
    while len(subscription.applied) < 2:
        await turn()
    conn.closed = True
    conn.tasks.cancel_all()  # what connection_lost does
    while conn.tasks.pending_ack_ids:
        await turn()
    assert sum(map(len, subscription.applied)) == 1000  # every id the client sent, none twice
    assert sorted(e for ids in subscription.applied for e in ids) == list(range(1000))
    assert conn.tasks.pending_ack_ids == 0 and not conn.tasks.holding_frames
