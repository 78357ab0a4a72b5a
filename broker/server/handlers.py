"""Handlers for each Pulsar command a client sends, one function per command type.

Each handler takes the connection and the decoded frame. Synchronous checks
raise BrokerError (the connection answers ERROR with the request id); the
asynchronous part runs in ``conn.tasks.spawn(..., request_id)``, which does the same
for errors raised later. The broker-side objects (topics, subscriptions,
consumers) never see protobuf: handlers translate at this boundary.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from broker.errors import (
    BrokerError, ChecksumError, ConsumerBusyError, ConsumerNotFoundError, NotAllowedError,
    TopicFencedError, UnsupportedVersionError,
)
from broker.security.authorization import Need, check, effective_role
from broker.server import acks, auth_handshake, schema_commands
from broker.server.field_bounds import check_producer, check_subscribe
from broker.subscriptions import SubscriptionType
from broker.subscriptions.consumer import Consumer
from broker.topics.names import parse_namespace, parse_topic
from broker.ownership.non_persistent_listing import topics_of_namespace
from broker.topics.persistent import DUPLICATE
from broker.topics.producer import AccessMode, Producer
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import field_for_type
from storage.managed_ledger import InitialPosition, Position

log = logging.getLogger(__name__)
T = pb.BaseCommand
MAX_PROTOCOL_VERSION = 20
LATEST_LEDGER_ID = (1 << 63) - 1
_producer_names = itertools.count()


@dataclass
class ProducerBinding:
    producer: Producer
    topic: object
    schema_version: int | None = None
    # The retriable error an earlier SEND of this producer failed with. Every later SEND fails with it too, without
    # being stored, until the client creates the producer again and resends in order: otherwise a message already
    # pipelined behind the refused one could be stored before it (nemesis seed 11).
    failed: BrokerError | None = None


@dataclass
class ConsumerBinding:
    consumer: Consumer
    subscription: object
    topic: object


# ---- connection --------------------------------------------------------------


def on_connect(conn, frame) -> None:
    # The session let this through only as the first CONNECT; sending CONNECTED (or ERROR) moves it on.
    c = frame.command.connect
    protocol_version = min(c.protocol_version, MAX_PROTOCOL_VERSION)
    conn.client_version = c.client_version
    if protocol_version < 6:
        conn.write(T.ERROR, error=pb.CommandError(request_id=0, error=UnsupportedVersionError.code,
                                                   message=f"protocol version {c.protocol_version} is too old; need >= 6"))
        conn.close()
        return

    def answer() -> None:
        conn.write(T.CONNECTED, connected=pb.CommandConnected(
            server_version=conn.service.version, protocol_version=protocol_version,
            max_message_size=conn.config.max_message_size,
        ))

    authentication = getattr(conn.service, "authentication", None)
    if authentication is not None and authentication.enabled:
        auth_handshake.authenticate_connect(conn, c, answer)  # answers once the credentials are checked
    else:
        answer()


def on_ping(conn, frame) -> None:
    conn.write(T.PONG, pong=pb.CommandPong())


def on_pong(conn, frame) -> None:
    pass  # data_received already noted that the peer is alive


def connection_closed(conn) -> None:
    for binding in list(conn.producers.values()):
        binding.topic.remove_producer(binding.producer)
    conn.producers.clear()
    for binding in list(conn.consumers.values()):
        conn.service.spawn(binding.subscription.remove_consumer(binding.consumer))
    conn.consumers.clear()


# ---- lookup ------------------------------------------------------------------


def on_partitioned_metadata(conn, frame) -> None:
    c = frame.command.partitionMetadata

    async def run():
        try:
            topic = parse_topic(c.topic)
            await check(conn.service, effective_role(conn), topic, Need.LOOKUP)
            partitions = await conn.service.partitioned_metadata(topic)
        except BrokerError as exc:
            conn.write(T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=pb.CommandPartitionedTopicMetadataResponse(
                request_id=c.request_id, response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=exc.code, message=str(exc)))
            return
        conn.write(T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=pb.CommandPartitionedTopicMetadataResponse(
            request_id=c.request_id, partitions=partitions, response=pb.CommandPartitionedTopicMetadataResponse.Success))

    conn.tasks.spawn(run(), c.request_id)


def on_lookup(conn, frame) -> None:
    c = frame.command.lookupTopic

    async def run():
        try:
            topic = parse_topic(c.topic)
            await check(conn.service, effective_role(conn), topic, Need.LOOKUP)
            broker, _ = await conn.service.lookup(topic, c.authoritative)
            # The client's advertised listener picks which of the owner's addresses it is given (Pulsar's
            # advertisedListeners); an unknown name fails the lookup with ServiceNotReady.
            url, url_tls = broker.lookup_urls(c.advertised_listener_name if c.HasField("advertised_listener_name") else None)
        except BrokerError as exc:
            conn.write(T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(
                request_id=c.request_id, response=pb.CommandLookupTopicResponse.Failed, error=exc.code, message=str(exc)))
            return
        redirect = broker.broker_id != conn.service.ownership.me.broker_id
        kind = pb.CommandLookupTopicResponse.Redirect if redirect else pb.CommandLookupTopicResponse.Connect
        conn.write(T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(
            request_id=c.request_id, brokerServiceUrl=url, brokerServiceUrlTls=url_tls, response=kind,
            authoritative=True, proxy_through_service_url=False))

    conn.tasks.spawn(run(), c.request_id)


def on_get_topics_of_namespace(conn, frame) -> None:
    c = frame.command.getTopicsOfNamespace

    async def run():
        ns = parse_namespace(c.namespace)
        await check(conn.service, effective_role(conn), ns, Need.NAMESPACE_LOOKUP)
        mode = c.mode if c.HasField("mode") else pb.CommandGetTopicsOfNamespace.PERSISTENT
        names = []
        if mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            names = [str(t) for t in await conn.service.resources.topics(ns)]
        if mode != pb.CommandGetTopicsOfNamespace.PERSISTENT:
            names += await topics_of_namespace(conn.service, ns)  # every broker's, as Pulsar lists them
        conn.write(T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
            request_id=c.request_id, topics=names, filtered=False, changed=True))

    conn.tasks.spawn(run(), c.request_id)


on_get_schema = schema_commands.on_get_schema
on_get_or_create_schema = schema_commands.on_get_or_create_schema


# ---- producers ---------------------------------------------------------------


def on_producer(conn, frame) -> None:
    # The session has the producer CREATING, or READY when this is a retry (a second create while one is
    # running never gets here: the connection answers it ProducerBusy).
    c = frame.command.producer
    check_producer(c)
    existing = conn.producers.get(c.producer_id)
    if existing is not None:  # a retry of a create that already succeeded
        existing.failed = None  # the client resends what is pending after this, in order
        _producer_success(conn, c.request_id, existing.producer, existing.topic, existing.schema_version)
        return
    topic_name = parse_topic(c.topic)
    schema = schema_commands.schema_of(c)
    mode = AccessMode(c.producer_access_mode) if c.HasField("producer_access_mode") else AccessMode.Shared
    name = c.producer_name if c.HasField("producer_name") and c.producer_name else \
        f"{conn.config.cluster_name}-{conn.config.broker_id}-{next(_producer_names)}"
    producer = Producer(c.producer_id, name, conn, mode, user_provided_name=c.user_provided_producer_name)

    async def run():
        checked_at = await check(conn.service, effective_role(conn), topic_name, Need.PRODUCE)
        topic = await conn.service.get_topic(topic_name, create=True)
        schema_version = await conn.service.schemas.for_producer(topic_name, schema, topic.policies)
        wait = await topic.add_producer(producer, c.topic_epoch if c.HasField("topic_epoch") else None)
        if conn.closed or conn.session.opened_by("producers", c.producer_id) != c.request_id:
            topic.remove_producer(producer)  # closed (and perhaps opened again) while we were creating it
            conn.session.abandon(c.request_id)
            return
        conn.producers[c.producer_id] = ProducerBinding(producer, topic, schema_version)
        conn.service.authorization.admitted(topic, checked_at)
        if wait is not None:
            conn.write(T.PRODUCER_SUCCESS, producer_success=pb.CommandProducerSuccess(
                request_id=c.request_id, producer_name=name, last_sequence_id=-1, producer_ready=False))
            await wait
        _producer_success(conn, c.request_id, producer, topic, schema_version)

    conn.tasks.spawn(run(), c.request_id, close_when_not_ready=True)


def _producer_success(conn, request_id: int, producer: Producer, topic, schema_version: int | None) -> None:
    success = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer.name,
        last_sequence_id=topic.dedup.last_sequence_id(producer.name), producer_ready=True,
    )
    if schema_version is not None:
        success.schema_version = schema_commands.encode_version(schema_version)
    if producer.access_mode.exclusive:
        success.topic_epoch = producer.epoch
    conn.write(T.PRODUCER_SUCCESS, producer_success=success)


def on_send(conn, frame) -> None:
    c = frame.command.send
    binding = conn.producers.get(c.producer_id)

    def error(exc: BrokerError) -> None:
        conn.budget.wasted()
        conn.write(T.SEND_ERROR, send_error=pb.CommandSendError(
            producer_id=c.producer_id, sequence_id=c.sequence_id, error=exc.code, message=str(exc)))

    if binding is None:
        error(NotAllowedError(f"no producer with id {c.producer_id} on this connection"))
        return
    if frame.metadata is None:
        error(NotAllowedError("SEND without a message payload"))
        return
    if not frame.checksum_ok:
        error(ChecksumError(f"checksum mismatch on sequence id {c.sequence_id}"))
        return
    if len(frame.payload) > conn.config.max_message_size:
        error(NotAllowedError(
            f"message of {len(frame.payload)} bytes exceeds the maximum message size of {conn.config.max_message_size} bytes"))
        return
    try:
        num_messages = message_count(c, frame.metadata, len(frame.payload), conn.config.max_num_messages_in_batch)
    except BrokerError as exc:
        error(exc)
        return
    producer, topic = binding.producer, binding.topic
    highest = c.highest_sequence_id if c.HasField("highest_sequence_id") else c.sequence_id
    size = len(frame.headers_and_payload)
    conn.tasks.send_started(size)
    topic.rates.on_send(conn, num_messages, size)  # publish rates: may pause this connection's reading
    conn.service.publish_rate.on_send(conn, num_messages, size)

    async def run():
        try:
            if binding.failed is not None:
                error(binding.failed)
                return
            position = await topic.publish(producer, c.sequence_id, highest, num_messages, frame.headers_and_payload)
        except BrokerError as exc:
            if exc.retriable:
                binding.failed = exc
            error(exc)
            if isinstance(exc, TopicFencedError):
                conn.out.close_producer(c.producer_id)
            return
        finally:
            conn.tasks.send_finished(size)
        ledger_id, entry_id = (position if position != DUPLICATE else ((1 << 64) - 1, (1 << 64) - 1))
        conn.write(T.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
            producer_id=c.producer_id, sequence_id=c.sequence_id, highest_sequence_id=highest,
            message_id=pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)))

    conn.tasks.spawn(run())


def message_count(send, metadata, payload_bytes: int, maximum: int) -> int:
    """The messages a SEND carries. Both counts the producer declares (the command's and the batch metadata's)
    must be at least 1 and at most the configured maximum and the payload's size (each message of a batch takes
    at least a byte): a poison count would otherwise stall consumers' permits and unacked accounting."""
    declared = (("num_messages", send.num_messages if send.HasField("num_messages") else 1),
                ("num_messages_in_batch",
                 metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1))
    bound = min(maximum, max(payload_bytes, 1))
    for field, value in declared:
        if not 1 <= value <= bound:
            raise NotAllowedError(f"{field} {value} is out of range: a message of {payload_bytes} bytes may carry "
                                  f"1..{bound} messages (max_num_messages_in_batch {maximum})")
    return declared[0][1]


def on_close_producer(conn, frame) -> None:
    c = frame.command.close_producer
    binding = conn.producers.pop(c.producer_id, None)
    if binding is not None:
        binding.topic.remove_producer(binding.producer)
    conn.out.success(c.request_id)


# ---- consumers ---------------------------------------------------------------


def _start_position(c) -> tuple[Position | None, bool]:
    """A subscribe's start_message_id as (position, inclusive); None for earliest/latest/absent."""
    if not c.HasField("start_message_id"):
        return None, False
    mid = c.start_message_id
    if mid.ledgerId >= 1 << 63 or (mid.ledgerId == LATEST_LEDGER_ID):
        return None, False
    # Start *at* the given entry, as Pulsar does: the client drops what it should not see
    # (the entry itself unless the reader is inclusive, earlier messages of a batch).
    return Position(mid.ledgerId, mid.entryId), True


def on_subscribe(conn, frame) -> None:
    c = frame.command.subscribe
    check_subscribe(c)
    if c.consumer_id in conn.consumers:
        raise ConsumerBusyError(f"consumer id {c.consumer_id} is already in use on this connection")
    topic_name = parse_topic(c.topic)
    if not c.subscription:
        raise NotAllowedError("subscription name is empty")
    sub_type = SubscriptionType(c.subType)
    durable = c.durable if c.HasField("durable") else True
    initial = InitialPosition.EARLIEST if c.initialPosition == pb.CommandSubscribe.Earliest else InitialPosition.LATEST
    start, inclusive = _start_position(c)
    schema = schema_commands.schema_of(c)
    if c.HasField("start_message_id") and c.start_message_id.ledgerId >= 1 << 63:
        initial = InitialPosition.EARLIEST
    consumer = Consumer(
        c.consumer_id, c.consumer_name or f"consumer-{c.consumer_id}", conn,
        priority_level=c.priority_level, partition_index=topic_name.partition_index,
        key_shared_meta=c.keySharedMeta if c.HasField("keySharedMeta") else None,
    )

    async def run():
        checked_at = await check(conn.service, effective_role(conn), topic_name, Need.CONSUME)
        topic = await conn.service.get_topic(topic_name, create=c.force_topic_creation if c.HasField("force_topic_creation") else True)
        await conn.service.schemas.for_consumer(topic_name, schema, schema_commands.topic_is_idle(topic), topic.policies)
        sub = await topic.subscribe(consumer, c.subscription, sub_type, durable=durable, initial_position=initial,
                                    start=start, start_inclusive=inclusive, read_compacted=c.read_compacted)
        if conn.closed:
            await sub.remove_consumer(consumer)
            return
        conn.consumers[c.consumer_id] = ConsumerBinding(consumer, sub, topic)
        conn.service.authorization.admitted(topic, checked_at)
        conn.out.success(c.request_id)

    conn.tasks.spawn(run(), c.request_id, close_when_not_ready=True)


def _binding(conn, consumer_id: int) -> ConsumerBinding:
    binding = conn.consumers.get(consumer_id)
    if binding is None:
        raise ConsumerNotFoundError(f"no consumer with id {consumer_id} on this connection")
    return binding


def on_flow(conn, frame) -> None:
    c = frame.command.flow
    binding = conn.consumers.get(c.consumer_id)
    if binding is not None:
        binding.subscription.flow(binding.consumer, c.messagePermits)


def on_ack(conn, frame) -> None:
    acks.on_ack(conn, frame, _binding(conn, frame.command.ack.consumer_id))


def on_redeliver(conn, frame) -> None:
    c = frame.command.redeliverUnacknowledgedMessages
    binding = conn.consumers.get(c.consumer_id)
    if binding is None:
        return
    positions = [Position(m.ledgerId, m.entryId) for m in c.message_ids] or None
    conn.tasks.spawn(binding.subscription.redeliver(binding.consumer, positions))


def on_unsubscribe(conn, frame) -> None:
    c = frame.command.unsubscribe
    binding = _binding(conn, c.consumer_id)

    async def run():
        await binding.topic.unsubscribe(binding.subscription.name, binding.consumer)
        conn.consumers.pop(c.consumer_id, None)
        conn.out.success(c.request_id)

    conn.tasks.spawn(run(), c.request_id)


def on_close_consumer(conn, frame) -> None:
    c = frame.command.close_consumer
    binding = conn.consumers.pop(c.consumer_id, None)

    async def run():
        if binding is not None:
            await binding.subscription.remove_consumer(binding.consumer)
        conn.out.success(c.request_id)

    conn.tasks.spawn(run(), c.request_id)


def on_seek(conn, frame) -> None:
    c = frame.command.seek
    binding = _binding(conn, c.consumer_id)

    async def run():
        sub, topic = binding.subscription, binding.topic
        if c.HasField("message_publish_time"):
            position = await topic.position_for_publish_time(c.message_publish_time)
        elif c.HasField("message_id"):
            mid = c.message_id
            if mid.ledgerId >= 1 << 63:
                position = topic.earliest_position()
            elif mid.ledgerId == LATEST_LEDGER_ID:
                position = topic.latest_position()
            else:
                position = Position(mid.ledgerId, mid.entryId)
        else:
            raise NotAllowedError("SEEK needs a message id or a publish time")
        await sub.reset(position)  # closes this consumer too: the client subscribes again
        conn.out.success(c.request_id)

    conn.tasks.spawn(run(), c.request_id)


def on_get_last_message_id(conn, frame) -> None:
    c = frame.command.getLastMessageId
    binding = _binding(conn, c.consumer_id)

    async def run():
        compacted = getattr(binding.subscription.cursor, "reads_compacted", False)
        position, batch_index = await binding.topic.last_message_id(compacted=compacted)
        partition = binding.consumer.partition_index
        last = pb.MessageIdData(ledgerId=position.ledger_id & ((1 << 64) - 1), entryId=position.entry_id & ((1 << 64) - 1),
                                partition=partition, batch_index=batch_index)
        md = binding.subscription.cursor.mark_delete_position
        conn.write(T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=pb.CommandGetLastMessageIdResponse(
            last_message_id=last, request_id=c.request_id,
            consumer_mark_delete_position=pb.MessageIdData(ledgerId=md.ledger_id & ((1 << 64) - 1),
                                                           entryId=md.entry_id & ((1 << 64) - 1))))

    conn.tasks.spawn(run(), c.request_id)


def on_consumer_stats(conn, frame) -> None:
    c = frame.command.consumerStats
    binding = _binding(conn, c.consumer_id)
    consumer, sub = binding.consumer, binding.subscription
    conn.write(T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=pb.CommandConsumerStatsResponse(
        request_id=c.request_id, consumerName=consumer.name, availablePermits=consumer.permits,
        unackedMessages=consumer.unacked_messages, blockedConsumerOnUnackedMsgs=consumer.blocked,
        msgBacklog=sub.backlog, type=sub.type.name if sub.type else ""))


TABLE = {
    T.CONNECT: on_connect,
    T.AUTH_RESPONSE: auth_handshake.on_auth_response,
    T.PING: on_ping,
    T.PONG: on_pong,
    T.PARTITIONED_METADATA: on_partitioned_metadata,
    T.LOOKUP: on_lookup,
    T.GET_TOPICS_OF_NAMESPACE: on_get_topics_of_namespace,
    T.GET_SCHEMA: on_get_schema,
    T.GET_OR_CREATE_SCHEMA: on_get_or_create_schema,
    T.PRODUCER: on_producer,
    T.SEND: on_send,
    T.CLOSE_PRODUCER: on_close_producer,
    T.SUBSCRIBE: on_subscribe,
    T.FLOW: on_flow,
    T.ACK: on_ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: on_redeliver,
    T.UNSUBSCRIBE: on_unsubscribe,
    T.CLOSE_CONSUMER: on_close_consumer,
    T.SEEK: on_seek,
    T.GET_LAST_MESSAGE_ID: on_get_last_message_id,
    T.CONSUMER_STATS: on_consumer_stats,
}

FIELD_OF = {t: field_for_type(t) for t in T.Type.values()}
