"""What the broker writes to one connection besides direct replies: errors, MESSAGE, consumer changes, closes.

The topic and subscription layers reach a client only through this object
(``binding.connection.out``); they never build protobuf themselves.
"""

from __future__ import annotations

from broker.errors import BrokerError
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command

T = pb.BaseCommand


class Outbound:
    def __init__(self, conn):
        self.conn = conn

    def error(self, request_id: int, exc: BrokerError) -> None:
        self.conn.write(T.ERROR, error=pb.CommandError(request_id=request_id, error=exc.code, message=str(exc)))

    def success(self, request_id: int) -> None:
        self.conn.write(T.SUCCESS, success=pb.CommandSuccess(request_id=request_id))

    def message(self, consumer_id: int, position, data: bytes, redelivery_count: int,
                ack_set: list[int] | None, partition: int) -> None:
        msg = pb.CommandMessage(
            consumer_id=consumer_id,
            message_id=pb.MessageIdData(ledgerId=position[0], entryId=position[1], partition=partition),
            redelivery_count=redelivery_count,
        )
        if ack_set:
            msg.ack_set.extend(ack_set)
        self.conn.write_frame(command(T.MESSAGE, message=msg), data)

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.conn.write(T.ACTIVE_CONSUMER_CHANGE,
                        active_consumer_change=pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active))

    def close_consumer(self, consumer_id: int) -> None:
        """The broker closes a consumer (topic unloaded, subscription reset): the client subscribes again."""
        self.conn.write(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=0))

    def reached_end_of_topic(self, consumer_id: int) -> None:
        self.conn.write(T.REACHED_END_OF_TOPIC,
                        reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=consumer_id))

    def close_producer(self, producer_id: int) -> None:
        """The broker closes a producer (fenced, topic unloaded): the client reconnects through lookup."""
        self.conn.producers.pop(producer_id, None)
        self.conn.write(T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=0))
