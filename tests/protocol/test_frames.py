import struct

import crc32c
import pytest
from hypothesis import given, strategies as st

from magnetar.protocol import (FrameDecoder, FrameTooLarge, ProtocolError, encode_command,
                               encode_payload_command, pb)

T = pb.BaseCommand


def ping():
    return T(type=T.PING, ping=pb.CommandPing())


def send_parts():
    cmd = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2))
    meta = pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=3)
    return cmd, meta, b"hello"


def test_ping_bytes():
    # BaseCommand{type=18 (0x08 0x12), ping={} (field 18 len-delim: 0x92 0x01 0x00)}
    assert encode_command(ping()) == bytes.fromhex("00000009" "00000005" "0812920100")


def test_connect_bytes():
    cmd = T(type=T.CONNECT, connect=pb.CommandConnect(client_version="c", protocol_version=20))
    # connect: 0a 01 63 (client_version) 20 14 (protocol_version=20) -> 5 bytes
    body = bytes.fromhex("0802" "1205" "0a0163" "2014")
    assert encode_command(cmd) == struct.pack(">II", 4 + len(body), len(body)) + body


def test_send_bytes_and_crc():
    cmd, meta, payload = send_parts()
    body = bytes.fromhex("0806" "3204" "08011002")
    m = bytes.fromhex("0a0170" "1002" "1803")
    rest = struct.pack(">I", len(m)) + m + payload
    tail = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(rest)) + rest
    expected = struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail
    assert encode_payload_command(cmd, meta, payload) == expected


@pytest.mark.parametrize("cmd", [
    ping(), T(type=T.PONG, pong=pb.CommandPong()),
    T(type=T.CONNECT, connect=pb.CommandConnect(client_version="x", protocol_version=20)),
    T(type=T.CONNECTED, connected=pb.CommandConnected(server_version="s", protocol_version=20)),
    T(type=T.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
        producer_id=1, sequence_id=2, message_id=pb.MessageIdData(ledgerId=3, entryId=4))),
])
def test_round_trip(cmd):
    [f] = FrameDecoder().feed(encode_command(cmd))
    assert f.command == cmd and f.payload is None


def test_split_every_byte():
    cmd, meta, payload = send_parts()
    data = encode_command(ping()) + encode_payload_command(cmd, meta, payload)
    for i in range(len(data) + 1):
        d = FrameDecoder()
        frames = d.feed(data[:i]) + d.feed(data[i:])
        assert [f.command for f in frames] == [ping(), cmd]
        assert frames[1].metadata == meta and frames[1].payload == payload and frames[1].checksum_ok


def test_oversized_rejected_from_header():
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_bytes=100).feed(struct.pack(">I", 101))


def test_bad_checksum_flagged():
    cmd, meta, payload = send_parts()
    data = bytearray(encode_payload_command(cmd, meta, payload))
    data[-1] ^= 0xFF
    [f] = FrameDecoder().feed(bytes(data))
    assert f.checksum_ok is False


def test_command_size_exceeds_total():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">II", 4, 100))


def test_garbage_protobuf():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">II", 7, 3) + b"\xff\xff\xff")


@given(st.lists(st.binary(max_size=64), max_size=8))
def test_fuzz_only_codec_errors(chunks):
    d = FrameDecoder(max_frame_bytes=1024)
    try:
        for c in chunks:
            d.feed(c)
    except ProtocolError:
        pass


UNMODELLED = {"NEW_TXN", "NEW_TXN_RESPONSE", "ADD_PARTITION_TO_TXN", "ADD_PARTITION_TO_TXN_RESPONSE",
              "ADD_SUBSCRIPTION_TO_TXN", "ADD_SUBSCRIPTION_TO_TXN_RESPONSE", "END_TXN", "END_TXN_RESPONSE",
              "END_TXN_ON_PARTITION", "END_TXN_ON_PARTITION_RESPONSE", "END_TXN_ON_SUBSCRIPTION",
              "END_TXN_ON_SUBSCRIPTION_RESPONSE", "TC_CLIENT_CONNECT_REQUEST", "TC_CLIENT_CONNECT_RESPONSE",
              "WATCH_TOPIC_LIST", "WATCH_TOPIC_LIST_SUCCESS", "WATCH_TOPIC_UPDATE", "WATCH_TOPIC_LIST_CLOSE"}


def test_every_modelled_type_code_has_its_field():
    from magnetar.protocol.frames import field_for_type

    for v in T.Type.DESCRIPTOR.values:
        field = field_for_type(v.number)
        if v.name in UNMODELLED:
            assert field is None, v.name
        else:
            assert field is not None and T.DESCRIPTOR.fields_by_name[field].number == v.number, v.name


def test_batch_round_trip():
    from magnetar.protocol import pack_batch, unpack_batch
    msgs = [(pb.SingleMessageMetadata(partition_key="k%d" % i, payload_size=0), b"m" * i) for i in range(4)]
    out = unpack_batch(pack_batch(msgs), 4)
    assert [(s.partition_key, p) for s, p in out] == [("k%d" % i, b"m" * i) for i in range(4)]
    with pytest.raises(ProtocolError):
        unpack_batch(pack_batch(msgs)[:-1], 4)


MID = pb.MessageIdData(ledgerId=7, entryId=8)
MORE = [
    T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(topic="t", subscription="s", subType=1, consumer_id=1, request_id=2)),
    T(type=T.PRODUCER, producer=pb.CommandProducer(topic="t", producer_id=1, request_id=2)),
    T(type=T.SEND_ERROR, send_error=pb.CommandSendError(producer_id=1, sequence_id=2, error=9, message="crc")),
    T(type=T.MESSAGE, message=pb.CommandMessage(consumer_id=1, message_id=MID)),
    T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=0, message_id=[MID])),
    T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=1000)),
    T(type=T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(consumer_id=1, request_id=2)),
    T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=1)),
    T(type=T.ERROR, error=pb.CommandError(request_id=1, error=11, message="nf")),
    T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=1, request_id=2)),
    T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=1, request_id=2)),
    T(type=T.PRODUCER_SUCCESS, producer_success=pb.CommandProducerSuccess(request_id=1, producer_name="p")),
    T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=[MID])),
    T(type=T.PARTITIONED_METADATA, partitionMetadata=pb.CommandPartitionedTopicMetadata(topic="t", request_id=1)),
    T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=pb.CommandPartitionedTopicMetadataResponse(request_id=1, partitions=3)),
    T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="t", request_id=1)),
    T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(request_id=1, brokerServiceUrl="pulsar://h:6650", response=1)),
    T(type=T.SEEK, seek=pb.CommandSeek(consumer_id=1, request_id=2, message_id=MID)),
    T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(consumer_id=1, request_id=2)),
    T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=pb.CommandGetLastMessageIdResponse(last_message_id=MID, request_id=2)),
    T(type=T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=pb.CommandActiveConsumerChange(consumer_id=1, is_active=True)),
    T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(request_id=1, namespace="public/default")),
    T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(request_id=1, topics=["a"])),
]


@pytest.mark.parametrize("cmd", MORE, ids=lambda c: T.Type.Name(c.type))
def test_round_trip_more(cmd):
    [f] = FrameDecoder().feed(encode_command(cmd))
    assert f.command == cmd


def test_command_helper():
    from magnetar.protocol import command
    assert command(T.PING, ping=pb.CommandPing()) == ping()


def test_split_batch_gives_parallel_lists_and_rejects_every_truncation():
    from magnetar.protocol import pack_batch, split_batch, unpack_batch
    msgs = [(pb.SingleMessageMetadata(partition_key="k%d" % i, payload_size=0), b"m" * i) for i in range(4)]
    packed = pack_batch(msgs)
    singles, payloads = split_batch(packed, 4)
    assert [s.partition_key for s in singles] == ["k0", "k1", "k2", "k3"]
    assert payloads == [b"", b"m", b"mm", b"mmm"]  # an explicit payload_size of 0 is a message, not a missing field
    assert unpack_batch(packed, 4) == list(zip(singles, payloads))
    assert split_batch(packed, 0) == ([], []) and unpack_batch(packed, 0) == []
    for cut in range(len(packed)):
        with pytest.raises(ProtocolError):
            split_batch(packed[:cut], 4)


def test_split_batch_rejects_a_single_message_metadata_without_payload_size_or_garbled():
    import struct

    from magnetar.protocol import split_batch
    no_size = pb.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(ProtocolError, match="missing required"):
        split_batch(struct.pack(">I", len(no_size)) + no_size, 1)
    garbled = b"\x1a\xff\xff"  # a length-delimited field longer than the bytes
    with pytest.raises(ProtocolError, match="bad SingleMessageMetadata"):
        split_batch(struct.pack(">I", len(garbled)) + garbled, 1)


@pytest.mark.parametrize("payload_size", [0, 1, 100, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 5 * 1024 * 1024])
@pytest.mark.parametrize("sequence_id", [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**35, 2**64 - 1])
def test_plain_batch_message_header_is_what_protobuf_writes(payload_size, sequence_id):
    from magnetar.protocol.frames import batch_message_header, plain_batch_message_header
    expected = batch_message_header(pb.SingleMessageMetadata(payload_size=payload_size, sequence_id=sequence_id))
    assert plain_batch_message_header(payload_size, sequence_id) == expected


@given(st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_plain_batch_message_header_round_trips_through_split_batch(payload, sequence_id):
    from magnetar.protocol import split_batch
    from magnetar.protocol.frames import plain_batch_message_header
    header = plain_batch_message_header(len(payload), sequence_id)
    [single], [got] = split_batch(header + payload, 1)
    assert (single.payload_size, single.sequence_id, got) == (len(payload), sequence_id, payload)


def test_plain_batch_message_header_refuses_negative_values():
    from magnetar.protocol.frames import plain_batch_message_header
    with pytest.raises(ValueError, match="negative"):
        plain_batch_message_header(1, -1)
