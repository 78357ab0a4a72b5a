"""Retention by size and by time: the broker's maintenance timer deletes whole old ledgers of a stream."""

from __future__ import annotations

import pytest

from magnetar.streams import EARLIEST, PositionTruncated, StreamClient
from storage.testing.waiting import wait_until_async

FAST_MAINTENANCE = {"MAGNETAR_BROKER_MAINTENANCE_INTERVAL_S": "0.2"}


@pytest.mark.parametrize("retention", [{"retention_size_bytes": 1024}, {"retention_time_s": 0}])
async def test_retention_deletes_whole_old_ledgers_and_readers_start_after_them(start_standalone, names, retention):
    ns, name = names
    broker = start_standalone(env=FAST_MAINTENANCE)
    async with StreamClient(broker.stream_address) as client:
        await client.create_namespace(ns, rolling_max_entries=5)
        await client.create_stream(ns, name, **retention)
        writer = await client.open_writer(ns, name)
        positions = [await writer.append(bytes(300)) for _ in range(30)]  # six full ledgers of 5 entries

        async def trimmed():
            info = await client.get_info(ns, name)
            return info if info.first_position > positions[0] else None

        info = await wait_until_async(trimmed, 30, "retention to delete the oldest ledgers")
        assert info.size_bytes < 30 * 300 and info.truncated_before is None
        first = info.first_position
        assert first in positions and first.slot == 0
        with pytest.raises(PositionTruncated):
            await client.open_reader(ns, name, positions[0]).read_batch()
        with pytest.raises(PositionTruncated):
            await client.open_reader(ns, name, 0).read_batch()
        batch = await client.open_reader(ns, name, EARLIEST).read_batch()
        assert batch[0].position == first and batch[0].sequence == positions.index(first)
        await writer.close()
