"""PRODUCER and SUBSCRIBE fields beyond their bounds are refused, naming the field; what is within them passes."""

from __future__ import annotations

import pytest

from broker.errors import NotAllowedError
from broker.server.field_bounds import MAX_NAME_CHARS, MAX_PROPERTIES, check_producer, check_subscribe
from magnetar.protocol import pulsar_api_pb2 as pb

T = "persistent://public/default/t"


def _kv(n: int, size: int = 1):
    return [pb.KeyValue(key=f"k{i}", value="v" * size) for i in range(n)]


@pytest.mark.parametrize("command, field", [
    (pb.CommandProducer(topic="t" * (MAX_NAME_CHARS + 1)), "topic"),
    (pb.CommandProducer(topic=T, producer_name="p" * (MAX_NAME_CHARS + 1)), "producer_name"),
    (pb.CommandProducer(topic=T, metadata=_kv(MAX_PROPERTIES + 1)), "metadata"),
    (pb.CommandProducer(topic=T, metadata=_kv(2, 40_000)), "metadata"),
])
def test_producer_fields_out_of_bounds(command, field):
    with pytest.raises(NotAllowedError, match=field):
        check_producer(command)


def _sub(**fields):
    return pb.CommandSubscribe(topic=T, subscription="s", **fields)


@pytest.mark.parametrize("command, field", [
    (pb.CommandSubscribe(topic=T, subscription="s" * (MAX_NAME_CHARS + 1)), "subscription"),
    (_sub(consumer_name="c" * (MAX_NAME_CHARS + 1)), "consumer_name"),
    (_sub(metadata=_kv(MAX_PROPERTIES + 1)), "metadata"),
    (_sub(subscription_properties=_kv(3, 30_000)), "subscription_properties"),
    (_sub(priority_level=-1), "priority_level"),
    (_sub(priority_level=2**31 - 1), "priority_level"),
    (_sub(start_message_id=pb.MessageIdData(ledgerId=1, entryId=1, batch_index=2**31 - 1)), "batch_index"),
    (_sub(keySharedMeta=pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=5, end=4)])), "hashRanges"),
    (_sub(keySharedMeta=pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=70_000)])), "hashRanges"),
    (_sub(keySharedMeta=pb.KeySharedMeta(keySharedMode=pb.STICKY,
                                         hashRanges=[pb.IntRange(start=i, end=i) for i in range(2000)])), "hashRanges"),
])
def test_subscribe_fields_out_of_bounds(command, field):
    with pytest.raises(NotAllowedError, match=field):
        check_subscribe(command)


def test_fields_within_bounds_pass():
    check_producer(pb.CommandProducer(topic=T, producer_name="p", metadata=_kv(10)))
    check_subscribe(_sub(consumer_name="c", metadata=_kv(10), priority_level=3,
                         start_message_id=pb.MessageIdData(ledgerId=1, entryId=2, batch_index=-1),
                         keySharedMeta=pb.KeySharedMeta(keySharedMode=pb.STICKY,
                                                        hashRanges=[pb.IntRange(start=0, end=65535)])))
