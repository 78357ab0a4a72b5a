"""The synchronous facade of magnetar.streams against a `broker standalone` process."""

from __future__ import annotations

import pytest

from magnetar.streams import EARLIEST, StreamNotFound, WriterFenced
from magnetar.streams.errors import InvalidStreamRequest
from magnetar.streams.sync import StreamClient


def test_the_sync_client_writes_reads_fences_and_raises_the_same_errors(standalone, names):
    ns, name = names
    with StreamClient(standalone.stream_address) as client:
        client.create_namespace(ns)
        client.create_stream(ns, name)
        writer = client.open_writer(ns, name)
        positions = writer.append_batch([b"a", b"b"]) + [writer.append(b"c")]
        reader = client.open_reader(ns, name, EARLIEST)
        records = [reader.read(timeout_s=30) for _ in range(3)]
        assert [r.data for r in records] == [b"a", b"b", b"c"] and [r.position for r in records] == positions
        second = client.open_writer(ns, name)
        with pytest.raises(WriterFenced):
            writer.append(b"fenced")
        second.append(b"d")
        assert reader.read(timeout_s=30).data == b"d"
        with pytest.raises(StreamNotFound):
            client.get_info(ns, "missing")
        with pytest.raises(InvalidStreamRequest):
            StreamClient("not an address")
        reader.close()
        second.close()
        writer.close()
