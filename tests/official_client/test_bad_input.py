"""Bad input over a raw socket gets an error or a closed connection, and other clients keep working."""

from __future__ import annotations

import struct

import pulsar

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import command, encode_command, encode_payload_command
from tests.official_client.support import receive_n

T = pb.BaseCommand


def _healthy(client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"still fine")
    assert receive_n(consumer, 1)[0].data() == b"still fine"


def test_garbage_bytes_close_only_that_connection(raw, client, topic):
    bad = raw(connect=False)
    bad.send(b"\x00\x00\x00\x08garbage!")  # a frame whose command is not a BaseCommand
    assert bad.closed_by_peer()
    _healthy(client, topic)


def test_frame_larger_than_the_limit_closes_the_connection(raw, client, topic):
    bad = raw()
    bad.send(struct.pack(">I", 64 * 1024 * 1024) + b"\x00" * 16)
    assert bad.closed_by_peer()
    _healthy(client, topic)


def test_command_before_connect_closes_the_connection(raw):
    bad = raw(connect=False)
    bad.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert bad.closed_by_peer()


def test_send_for_an_unknown_producer_gets_send_error(raw, client, topic):
    conn = raw()
    metadata = pb.MessageMetadata(producer_name="nobody", sequence_id=7, publish_time=1)
    conn.send(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=99, sequence_id=7)), metadata, b"x"))
    reply = conn.next()
    assert reply.type == T.SEND_ERROR
    assert reply.send_error.sequence_id == 7 and "no producer" in reply.send_error.message
    conn.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert conn.next().type == T.PONG  # the connection is still usable
    _healthy(client, topic)


def test_invalid_topic_name_gets_a_specific_error(raw):
    conn = raw()
    conn.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(
        topic="persistent://public/default/a/b", producer_id=1, request_id=5))))
    reply = conn.next()
    assert reply.type == T.ERROR and reply.error.request_id == 5
    assert reply.error.error == pb.InvalidTopicName and "invalid topic" in reply.error.message


def test_bad_checksum_gets_checksum_error(raw, topic):
    conn = raw()
    conn.send(encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))))
    assert conn.next().type == T.PRODUCER_SUCCESS
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    frame = bytearray(encode_payload_command(command(T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0)), metadata, b"payload"))
    frame[-1] ^= 0xFF  # flip the last payload byte: the CRC32C no longer matches
    conn.send(bytes(frame))
    reply = conn.next()
    assert reply.type == T.SEND_ERROR and reply.send_error.error == pb.ChecksumError


def test_a_second_connect_is_ignored_and_the_connection_stays(raw):
    conn = raw()
    conn.send(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="again", protocol_version=20))))
    conn.send(encode_command(command(T.PING, ping=pb.CommandPing())))
    assert conn.next().type == T.PONG  # nothing answers the second CONNECT


def test_connect_and_producer_in_one_write(raw, topic):
    """The PRODUCER right behind CONNECT is judged after CONNECTED went out, not refused as 'before CONNECT'."""
    conn = raw(connect=False)
    conn.send(encode_command(command(T.CONNECT, connect=pb.CommandConnect(client_version="raw", protocol_version=20)))
              + encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=5))))
    assert conn.next().type == T.CONNECTED
    reply = conn.next()
    assert reply.type == T.PRODUCER_SUCCESS and reply.producer_success.request_id == 5


def test_a_second_create_of_a_producer_being_created_is_producer_busy(raw, topic):
    conn = raw()
    create = [encode_command(command(T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=rid)))
              for rid in (5, 6)]
    conn.send(create[0] + create[1])
    replies = {reply.type: reply for reply in (conn.next(), conn.next())}
    assert replies[T.ERROR].error.request_id == 6 and replies[T.ERROR].error.error == pb.ProducerBusy
    assert replies[T.PRODUCER_SUCCESS].producer_success.request_id == 5
    conn.send(create[1])  # once it exists, a retry is answered with success
    reply = conn.next()
    assert reply.type == T.PRODUCER_SUCCESS and reply.producer_success.request_id == 6
