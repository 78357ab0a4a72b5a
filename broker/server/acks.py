"""ACK: a consumer's acknowledgements, applied a slice of ids per turn of the event loop.

How it works: one ACK may carry up to MAX_ACK_MESSAGE_IDS ids (the clients group up to 1,000). Each id costs
the loop a few microseconds -- reading it out of protobuf, checking it against what the consumer was sent and
what the log holds, bounding its batch bitset, changing the cursor -- so a full frame handled in one go holds
every other client of the broker for milliseconds, and an ACK bomb sends such frames back to back. Here the first
ACK_IDS_PER_TURN ids are applied at once (an ordinary ACK is applied before the handler returns, as before), and
the rest a slice per later turn, while the connection's next frames wait: the commands of one connection are
still handled in order, and the next one sees every id of this ACK applied. Only the ids of the slice in hand are
read out of the frame, so nothing per id outlives its slice (long-lived garbage is what makes the collector walk
the whole heap). The whole ACK is one durable cursor write, after its last slice, and its receipt follows it.

Acks of entries the consumer was not sent, and of positions that name no entry, are charged to the connection's
command budget per slice (broker.server.command_budget); a connection in debt waits before its next frame.
"""

from __future__ import annotations

import asyncio
import logging

from broker.errors import BrokerError, NotAllowedError
from magnetar.protocol import pulsar_api_pb2 as pb
from storage.managed_ledger import Position

log = logging.getLogger(__name__)
T = pb.BaseCommand
# Ours: the clients group at most 1,000 acks into one ACK (ackGroupingMaxSize); this bounds one frame's work.
MAX_ACK_MESSAGE_IDS = 10_000  # MessageId.latest is (Long.MAX_VALUE, Long.MAX_VALUE)
# Ids applied per turn of the loop: ~0.1-0.5 ms of work, the stall one ACK may cause any other client.
ACK_IDS_PER_TURN = 100
APPLYING_ACK = "an ACK being applied"


def slices(count: int, per_turn: int) -> list[tuple[int, int]]:
    """[lo, hi) bounds of the slices ``count`` ids are applied in, ``per_turn`` at most each, in order."""
    if per_turn <= 0:
        raise ValueError("per_turn must be positive")
    return [(lo, min(lo + per_turn, count)) for lo in range(0, count, per_turn)]


def ack_ids(message_ids) -> list[tuple[Position, list[int] | None, int]]:
    """(position, ack_set or None, batch_size) per id. Each field read through protobuf builds an object: the ack
    set is read once, and the batch size only when there is one."""
    out = []
    for m in message_ids:
        ack_set = m.ack_set
        out.append((Position(m.ledgerId, m.entryId), list(ack_set), m.batch_size) if ack_set
                   else (Position(m.ledgerId, m.entryId), None, 0))
    return out


def _charge(conn, binding, ids) -> None:
    """Acks of entries the consumer was not sent are not bounded by what the broker sent: paced per connection."""
    pending, cursor = binding.consumer.pending, binding.subscription.cursor
    undispatched = [position for position, _, _ in ids if position not in pending]
    if undispatched:
        conn.budget.undispatched_acks(len(undispatched))
        invented = sum(1 for position in undispatched if not cursor.exists(position))
        if invented:
            conn.budget.wasted(invented)  # positions past the log's end cost the loop and move nothing


def on_ack(conn, frame, binding) -> None:
    c = frame.command.ack
    count = len(c.message_id)
    if not count:
        raise NotAllowedError("ACK without message ids")
    if count > MAX_ACK_MESSAGE_IDS:
        raise NotAllowedError(f"ACK with {count} message ids; at most {MAX_ACK_MESSAGE_IDS} per ACK")
    request_id = c.request_id if c.HasField("request_id") else None
    subscription = binding.subscription

    def answer(exc: BrokerError | None) -> None:
        if request_id is not None:
            conn.write(T.ACK_RESPONSE, ackResponse=pb.CommandAckResponse(
                consumer_id=c.consumer_id, request_id=request_id,
                **({} if exc is None else {"error": exc.code, "message": str(exc)})))
        elif exc is not None:
            log.warning("ack from %s failed: %s", conn.remote_address, exc)

    if c.ack_type == pb.CommandAck.Cumulative:
        ids = ack_ids(c.message_id[-1:])  # a cumulative ack means its last id; the others are never read
        _charge(conn, binding, ids)
        conn.tasks.ack_started(1)

        async def cumulative():
            try:
                await subscription.acknowledge(binding.consumer, True, ids, receipt=request_id is not None)
            except BrokerError as exc:
                return answer(exc)
            finally:
                conn.tasks.ack_finished(1)
            answer(None)

        conn.tasks.spawn(cumulative())
        return

    parts = slices(count, ACK_IDS_PER_TURN)
    conn.tasks.ack_started(count)

    def apply(lo: int, hi: int) -> None:
        ids = ack_ids(c.message_id[lo:hi])
        _charge(conn, binding, ids)
        subscription.ack_individual_now(binding.consumer, ids)

    try:
        apply(*parts[0])
    except BrokerError as exc:
        conn.tasks.ack_finished(count)
        return answer(exc)
    if len(parts) > 1:
        conn.tasks.pause_reading(APPLYING_ACK, hold_frames=True)  # this connection's next command sees it all

    async def rest():
        try:
            try:
                for i in range(1, len(parts)):
                    try:
                        await asyncio.sleep(0)  # one slice per turn: every other connection's work runs between
                    except asyncio.CancelledError:
                        # The connection closed. What the client sent is applied all the same (at once: no one
                        # waits for turns now), as an ACK handled in one go would have been.
                        for lo, hi in parts[i:]:
                            apply(lo, hi)
                        raise
                    apply(*parts[i])
            finally:
                conn.tasks.resume_reading(APPLYING_ACK)
            await subscription.acks_applied(receipt=request_id is not None)
        except BrokerError as exc:
            return answer(exc)
        finally:
            conn.tasks.ack_finished(count)
        answer(None)

    conn.tasks.spawn(rest())
