"""The Stream API on one `broker standalone` process (3 bookies in zones a, b, c), through magnetar.streams."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from magnetar.streams import (
    EARLIEST, LATEST, InvalidPosition, InvalidStreamRequest, NamespaceExists, NamespaceNotFound, Position,
    PositionTruncated, StreamClient, StreamExists, StreamNotFound, WriterFenced,
)

RECORDS = 10_000
BATCH = 100


async def _collect(reader, count: int, timeout_s: float = 60) -> list:
    out = []

    async def take():
        async for record in reader:
            out.append(record)
            if len(out) == count:
                return

    await asyncio.wait_for(take(), timeout_s)
    return out


async def test_a_tailing_reader_sees_ten_thousand_batched_records_in_order_and_a_new_one_within_100ms(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns)
        await client.create_stream(ns, name)
        reader = await client.open_reader(ns, name, EARLIEST).open()  # tailing the empty stream from here on
        received: list = []
        seen = asyncio.Event()

        async def tail():
            async for record in reader:
                received.append((time.monotonic(), record))
                seen.set()

        tailing = asyncio.ensure_future(tail())
        writer = await client.open_writer(ns, name)
        batches = [[f"{i}".encode() for i in range(start, start + BATCH)] for start in range(0, RECORDS, BATCH)]
        positions = await asyncio.gather(*(writer.append_batch(b) for b in batches))
        flat = [p for batch in positions for p in batch]
        assert flat == sorted(flat) and len(set(flat)) == RECORDS
        deadline = time.monotonic() + 60
        while len(received) < RECORDS and time.monotonic() < deadline:
            seen.clear()
            await asyncio.wait_for(seen.wait(), 30)
        records = [r for _, r in received]
        assert [r.data for r in records] == [f"{i}".encode() for i in range(RECORDS)]
        assert [r.sequence for r in records] == list(range(RECORDS))
        assert [r.position for r in records] == flat

        latencies = []
        for i in range(5):
            before = len(received)
            started = time.monotonic()
            await writer.append(f"new-{i}".encode())
            while len(received) == before:
                seen.clear()
                await asyncio.wait_for(seen.wait(), 5)
            at, record = received[before]
            assert record.data == f"new-{i}".encode() and record.sequence == RECORDS + i
            latencies.append(at - started)
        assert statistics.median(latencies) < 0.100, latencies
        tailing.cancel()
        await reader.close()
        await writer.close()


async def test_a_second_writer_fences_the_first_and_nothing_the_first_sends_afterwards_is_readable(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns)
        await client.create_stream(ns, name)
        first = await client.open_writer(ns, name)
        acked = [await first.append(f"first-{i}".encode()) for i in range(20)]
        # Appends in flight while the second writer opens: each is either acknowledged or fenced.
        in_flight = [asyncio.ensure_future(first.append(f"racing-{i}".encode())) for i in range(50)]
        second = await client.open_writer(ns, name)
        assert second.epoch == first.epoch + 1
        raced = await asyncio.gather(*in_flight, return_exceptions=True)
        assert all(isinstance(r, (Position, WriterFenced)) for r in raced), raced
        with pytest.raises(WriterFenced):
            await first.append(b"after-fence")
        with pytest.raises(WriterFenced):
            await first.append_batch([b"after-fence-2", b"after-fence-3"])
        last = await second.append_batch([f"second-{i}".encode() for i in range(10)])
        info = await client.get_info(ns, name)
        assert info.last_position == last[-1] and info.writer_epoch == second.epoch

        reader = client.open_reader(ns, name, EARLIEST)
        records = await _collect(reader, info.next_sequence)
        data = [r.data for r in records]
        assert b"after-fence" not in data and b"after-fence-2" not in data
        racing = data[20:-10]
        # A racing append the fence failed may still have reached the bookies before the fence and be readable
        # (its outcome was unknown to the writer); one that was acknowledged always is. Either way, in order.
        acknowledged = [f"racing-{i}".encode() for i, r in enumerate(raced) if isinstance(r, Position)]
        assert racing == [f"racing-{i}".encode() for i in range(len(racing))] and set(acknowledged) <= set(racing)
        assert data[:20] == [f"first-{i}".encode() for i in range(20)]
        assert data[-10:] == [f"second-{i}".encode() for i in range(10)]
        assert [r.sequence for r in records] == list(range(len(records)))
        assert records[-1].position == last[-1] and acked == [r.position for r in records[:20]]
        await reader.close()
        await first.close()
        await second.close()


async def test_appends_racing_a_fence_end_acknowledged_or_fenced_round_after_round(standalone, names):
    """The race above, many times: grpcio's aio client reports INTERNAL ("Internal error from Core") instead of the
    broker's status when a write is in flight as the call ends, so the broker names the error in-band first and
    ends the call only once the writer stopped writing. Before that, about one round in six lost WriterFenced."""
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns)
        await client.create_stream(ns, name)

        async def rounds():
            for round_ in range(20):
                first = await client.open_writer(ns, name)
                await first.append(b"before the race")
                in_flight = [asyncio.ensure_future(first.append(f"racing-{i}".encode())) for i in range(50)]
                second = await client.open_writer(ns, name)
                raced = await asyncio.gather(*in_flight, return_exceptions=True)
                assert all(isinstance(r, (Position, WriterFenced)) for r in raced), (round_, raced)
                assert any(isinstance(r, WriterFenced) for r in raced), round_
                await first.close()
                await second.close()

        await asyncio.wait_for(rounds(), 60)


async def test_a_reader_at_a_truncated_position_or_sequence_gets_position_truncated(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns, rolling_max_entries=10)
        await client.create_stream(ns, name)
        writer = await client.open_writer(ns, name)
        positions = [p for _ in range(5) for p in await writer.append_batch([b"x"] * 3 + [b"y"])]  # 20 records
        cut = positions[13]  # inside an entry: slots before it become unreadable too
        info = await client.truncate(ns, name, cut)
        assert info.truncated_before == cut and info.first_position == cut and info.first_sequence == 13
        for start in (positions[0], positions[12], 0, 12):
            with pytest.raises(PositionTruncated):
                await client.open_reader(ns, name, start).read_batch()
        first = (await client.open_reader(ns, name, EARLIEST).read_batch())[0]
        assert (first.position, first.sequence) == (cut, 13)
        by_sequence = (await client.open_reader(ns, name, 15).read_batch())[0]
        assert (by_sequence.position, by_sequence.sequence) == (positions[15], 15)
        with pytest.raises(InvalidPosition):
            await client.open_reader(ns, name, Position(positions[-1].ledger_id + 1000, 0, 0)).read_batch()
        with pytest.raises(InvalidPosition):
            await client.truncate(ns, name, Position(positions[-1].ledger_id + 1000, 0, 0))
        await writer.close()


async def test_a_reader_at_latest_sees_only_new_records(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns)
        await client.create_stream(ns, name)
        writer = await client.open_writer(ns, name)
        await writer.append_batch([b"old-1", b"old-2"])
        reader = await client.open_reader(ns, name, LATEST).open()
        assert reader.start == (await client.get_info(ns, name)).next_position  # resolved: a reconnect resumes there
        pending = asyncio.ensure_future(reader.read_batch())
        await writer.append(b"new")
        batch = await asyncio.wait_for(pending, 10)
        assert [r.data for r in batch] == [b"new"] and batch[0].sequence == 2
        await reader.close()
        await writer.close()


async def test_namespaces_and_streams_are_created_listed_described_and_deleted(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        policies = await client.create_namespace(ns, ensemble_size=3, write_quorum=3, ack_quorum=2, min_zones=3,
                                                 retention_time_s=3600)
        assert (policies["ensemble_size"], policies["write_quorum"], policies["ack_quorum"], policies["min_zones"]) == (3, 3, 2, 3)
        with pytest.raises(NamespaceExists):
            await client.create_namespace(ns)
        with pytest.raises(NamespaceNotFound):
            await client.create_stream(f"{ns}-missing", name)
        info = await client.create_stream(ns, name, rolling_max_bytes=64 * 1024)
        assert info.policies["rolling_max_bytes"] == 64 * 1024 and info.policies["retention_time_s"] == 3600
        assert info.policies["ensemble_size"] == 3 and info.last_position is None
        with pytest.raises(StreamExists):
            await client.create_stream(ns, name)
        assert await client.list_streams(ns) == [name]
        assert ns in await client.list_namespaces("public")
        await client.delete_stream(ns, name)
        assert await client.list_streams(ns) == []
        with pytest.raises(StreamNotFound):
            await client.get_info(ns, name)
        with pytest.raises(StreamNotFound):
            await client.open_writer(ns, name)
        await client.delete_namespace(ns)
        with pytest.raises(NamespaceNotFound):
            await client.get_namespace(ns)


@pytest.mark.parametrize("bad", [
    lambda c, ns, name: c.create_namespace(ns, ensemble_size=2, write_quorum=3, ack_quorum=2),
    lambda c, ns, name: c.create_namespace("no/such/shape"),
    lambda c, ns, name: c.create_namespace(ns, rolling_max_bytes=10),
])
async def test_bad_requests_get_a_specific_error(standalone, names, bad):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        with pytest.raises(InvalidStreamRequest):
            await bad(client, ns, name)


async def test_bounds_on_appends_and_read_batches(standalone, names):
    ns, name = names
    async with StreamClient(standalone.stream_address) as client:
        await client.create_namespace(ns)
        await client.create_stream(ns, name)
        writer = await client.open_writer(ns, name)
        with pytest.raises(InvalidStreamRequest, match="entry limit"):
            await writer.append(b"x" * (6 * 1024 * 1024))
        writer = await client.open_writer(ns, name)  # the refused append ended that write stream
        with pytest.raises(InvalidStreamRequest, match="1..10000 records"):
            await writer.append_batch([b""] * 10_001)
        with pytest.raises(InvalidStreamRequest, match="max_records_per_batch"):
            await client.open_reader(ns, name, EARLIEST, max_records_per_batch=100_000).read_batch()
        with pytest.raises(InvalidStreamRequest):
            client.open_reader(ns, name, start="yesterday")
        writer = await client.open_writer(ns, name)
        assert await writer.append(b"still writable") == (await client.get_info(ns, name)).last_position
        await writer.close()
