"""Retention by size and by time: the broker's maintenance timer deletes whole old ledgers of a stream."""

from __future__ import annotations

import pytest

from magnetar.streams import EARLIEST, PositionTruncated, StreamClient
from storage.testing.waiting import wait_until_async

FAST_MAINTENANCE = {"MAGNETAR_BROKER_MAINTENANCE_INTERVAL_S": "0.2"}


@pytest.mark.parametrize("retention, kept", [
    ({"retention_size_bytes": 1024}, 5),  # ledgers of 5 x ~330 bytes: only the newest full one stays
    ({"retention_time_s": 0}, 0),  # every ledger but the one being written goes
])
async def test_retention_deletes_whole_old_ledgers_and_readers_start_after_them(start_standalone, names, retention, kept):
    ns, name = names
    broker = start_standalone(env=FAST_MAINTENANCE)
    async with StreamClient(broker.stream_address) as client:
        await client.create_namespace(ns, rolling_max_entries=5)
        await client.create_stream(ns, name, **retention)
        writer = await client.open_writer(ns, name)
        positions = [await writer.append(bytes(300)) for _ in range(30)]  # six full ledgers of 5 entries

        async def trimmed():
            info = await client.get_info(ns, name)
            return info if info.first_sequence == 30 - kept else None

        info = await wait_until_async(trimmed, 30, f"retention to keep only the last {kept} records")
        assert info.size_bytes < 6 * 300 and info.truncated_before is None
        with pytest.raises(PositionTruncated):
            await client.open_reader(ns, name, positions[0]).read_batch()
        with pytest.raises(PositionTruncated):
            await client.open_reader(ns, name, 0).read_batch()
        if kept:
            batch = await client.open_reader(ns, name, EARLIEST).read_batch()
            assert [r.sequence for r in batch] == list(range(25, 30)) and batch[0].position == positions[25]
        await writer.close()
