"""The Stream API's wire contract, through a raw gRPC stub (any gRPC client, not only magnetar.streams)."""

from __future__ import annotations

import grpc
import pytest

from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams import stream_api_pb2_grpc as pb_grpc
from magnetar.streams.errors import END_NOTICE_KEY, ERROR_KEY


def _code_of(exc: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    return exc.code(), dict(exc.trailing_metadata() or ()).get(ERROR_KEY)


async def _write(stub, requests) -> list:
    call = stub.Write(iter(requests))
    return [response async for response in call]


@pytest.fixture
async def stub(standalone):
    async with grpc.aio.insecure_channel(standalone.stream_address) as channel:
        yield pb_grpc.StreamServiceStub(channel)


async def test_a_write_stream_must_start_with_open_and_carry_only_appends_after(stub, names):
    ns, name = names
    await stub.CreateNamespace(pb.CreateNamespaceRequest(namespace=ns))
    await stub.CreateStream(pb.CreateStreamRequest(namespace=ns, stream=name))
    append = pb.WriteRequest(append=pb.AppendRequest(request_id=1, records=[b"x"]))
    open_ = pb.WriteRequest(open=pb.StreamRequest(namespace=ns, stream=name))
    for requests, message in (([append], "starts with an open"), ([open_, append, open_], "only appends follow"),
                              ([open_, pb.WriteRequest(append=pb.AppendRequest(request_id=2))], "1..10000 records")):
        with pytest.raises(grpc.RpcError) as info:
            await _write(stub, requests)
        assert _code_of(info.value) == (grpc.StatusCode.INVALID_ARGUMENT, "InvalidStreamRequest")
        assert message in info.value.details()
    responses = await _write(stub, [open_, append])
    assert responses[0].WhichOneof("kind") == "opened" and responses[1].appended.request_id == 1
    assert responses[1].appended.count == 1 and responses[1].appended.first_sequence == 1  # after the "x" above


async def _opened(stub, ns, name, metadata=()):
    call = stub.Write(metadata=metadata)
    await call.write(pb.WriteRequest(open=pb.StreamRequest(namespace=ns, stream=name)))
    assert (await call.read()).WhichOneof("kind") == "opened"
    return call


async def test_a_write_stream_that_asks_names_its_error_in_band_and_ends_after_the_client_half_closes(stub, names):
    ns, name = names
    await stub.CreateNamespace(pb.CreateNamespaceRequest(namespace=ns))
    await stub.CreateStream(pb.CreateStreamRequest(namespace=ns, stream=name))
    append = pb.WriteRequest(append=pb.AppendRequest(request_id=1, records=[b"x"]))
    first = await _opened(stub, ns, name, ((END_NOTICE_KEY, "true"),))
    second = await _opened(stub, ns, name)  # fences the first
    await first.write(append)
    ended = await first.read()
    assert ended.WhichOneof("kind") == "ended" and ended.ended.code == "WriterFenced"
    assert "was fenced" in ended.ended.message
    await first.write(append)  # still read (and dropped) until the half-close
    await first.done_writing()
    with pytest.raises(grpc.RpcError) as info:
        await first.read()
    assert _code_of(info.value) == (grpc.StatusCode.FAILED_PRECONDITION, "WriterFenced")
    assert (await stub.GetStreamInfo(pb.StreamRequest(namespace=ns, stream=name))).next_sequence == 0

    # A client that did not ask gets the status alone, as before the notice existed.
    await _opened(stub, ns, name)  # fences the second
    await second.write(append)
    with pytest.raises(grpc.RpcError) as info:
        await second.read()
    assert _code_of(info.value) == (grpc.StatusCode.FAILED_PRECONDITION, "WriterFenced")


async def test_errors_carry_their_status_and_code(stub, names):
    ns, name = names
    cases = [
        (stub.GetStreamInfo(pb.StreamRequest(namespace=ns, stream=name)), grpc.StatusCode.NOT_FOUND, "NamespaceNotFound"),
        (stub.CreateNamespace(pb.CreateNamespaceRequest(namespace="a/b/c")), grpc.StatusCode.INVALID_ARGUMENT,
         "InvalidStreamRequest"),
        (stub.CreateStream(pb.CreateStreamRequest(namespace="public/default", stream="../x")),
         grpc.StatusCode.INVALID_ARGUMENT, "InvalidStreamRequest"),
    ]
    for call, status, code in cases:
        with pytest.raises(grpc.RpcError) as info:
            await call
        assert _code_of(info.value) == (status, code)
    await stub.CreateNamespace(pb.CreateNamespaceRequest(namespace=ns))
    with pytest.raises(grpc.RpcError) as info:
        await stub.GetStreamInfo(pb.StreamRequest(namespace=ns, stream=name))
    assert _code_of(info.value) == (grpc.StatusCode.NOT_FOUND, "StreamNotFound")
    with pytest.raises(grpc.RpcError) as info:
        await stub.Truncate(pb.TruncateRequest(namespace=ns, stream=name))
    assert _code_of(info.value)[1] in ("StreamNotFound", "InvalidStreamRequest")
