"""The Stream API on real processes: ZooKeeper, bookie processes in three zones, `broker start` processes."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.streams import (
    EARLIEST, NamespaceNotFound, PlacementUnsatisfiable, StreamClient, StreamUnavailable, WriterFenced,
)
from storage.client import ClientConfig, LedgerClient
from storage.errors import NoSuchEntryError, NoSuchLedgerError
from storage.testing.processes import BrokerProcess
from storage.testing.waiting import wait_until_async

SESSION = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}


def start_broker(tmp_path, metadata_url: str, index: int = 0) -> BrokerProcess:
    return BrokerProcess(tmp_path / f"broker-{index}", metadata_url=metadata_url, env=dict(SESSION))


async def _read(client: StreamClient, ns: str, name: str, count: int, start=EARLIEST) -> list:
    reader = client.open_reader(ns, name, start)
    out = []
    try:
        while len(out) < count:
            out.extend(await asyncio.wait_for(reader.read_batch(), 60))
    finally:
        await reader.close()
    return out


async def test_rolling_by_size_makes_several_ledgers_and_truncation_deletes_whole_ledgers_from_every_bookie(
        start_bookies, tmp_path, names):
    ns, name = names
    cluster = start_bookies(3, env={"MAGNETAR_BOOKIE_GC_INTERVAL_MS": "200"})
    broker = start_broker(tmp_path, cluster.metadata_url).start(60)
    try:
        async with StreamClient(broker.stream_address) as client:
            await client.create_namespace(ns)
            await client.create_stream(ns, name, rolling_max_bytes=64 * 1024)
            writer = await client.open_writer(ns, name)
            positions = [await writer.append(bytes([i]) * 8 * 1024) for i in range(40)]  # 320 KiB
            info = await client.get_info(ns, name)
            ledgers = [l["ledger_id"] for l in info.ledgers if l["entries"]]
            assert len(ledgers) >= 4, info.ledgers
            assert all(l["size_bytes"] <= 64 * 1024 + 9 * 1024 for l in info.ledgers)
            cut = positions[30]
            doomed = [l for l in ledgers if l < cut.ledger_id]
            kept = [l for l in ledgers if l >= cut.ledger_id]
            async with await LedgerClient.open(cluster.metadata_url, ClientConfig(read_timeout_s=5.0)) as ledger_client:
                await ledger_client.registry.refresh()
                ensembles = {l: (await ledger_client.get_metadata(l))[0].ensembles[0][1] for l in ledgers}
                info = await client.truncate(ns, name, cut)
                assert [l["ledger_id"] for l in info.ledgers if l["entries"]] == kept
                assert info.first_position == cut

                async def gone_from_bookies() -> bool:
                    if set(doomed) & set(await ledger_client.list_ledgers()):
                        return False
                    for ledger in doomed:
                        for bookie in ensembles[ledger]:
                            try:
                                await ledger_client.context.pool.read(bookie, ledger, 0)
                                return False
                            except (NoSuchLedgerError, NoSuchEntryError):
                                continue
                    return True

                await wait_until_async(gone_from_bookies, 30, f"ledgers {doomed} to leave the metadata and every bookie")
                for ledger in kept:  # what remains is intact on its bookies
                    for bookie in ensembles[ledger]:
                        await ledger_client.context.pool.read(bookie, ledger, 0)
            records = await _read(client, ns, name, 10)
            assert [r.data[0] for r in records] == list(range(30, 40)) and records[0].position == cut
            await writer.close()
    finally:
        broker.stop()


async def test_after_a_kill_9_the_stream_reopens_on_another_broker_with_every_acknowledged_record(
        start_bookies, tmp_path, names):
    ns, name = names
    cluster = start_bookies(3)
    brokers = [start_broker(tmp_path, cluster.metadata_url, i) for i in range(2)]
    for b in brokers:
        b.spawn()
    try:
        for b in brokers:
            b.wait_healthy(60)
        both = ",".join(b.stream_address for b in brokers)
        async with StreamClient(both) as client:
            await client.create_namespace(ns)
            await client.create_stream(ns, name)
            await client.get_info(ns, name)
            owner = next(b for b in brokers if b.stream_address == client._owners[(ns, name)])
            other = next(b for b in brokers if b is not owner)
            async with StreamClient(other.stream_address) as redirected:  # asks the broker that does not own it
                assert (await redirected.get_info(ns, name)).stream == name
                assert redirected._owners[(ns, name)] == owner.stream_address  # followed the redirect

            writer = await client.open_writer(ns, name)
            acked = [p for i in range(20) for p in await writer.append_batch([f"{i}-{j}".encode() for j in range(10)])]
            owner.kill9()

            records = await _read(client, ns, name, 200)
            assert [r.data for r in records] == [f"{i}-{j}".encode() for i in range(20) for j in range(10)]
            assert [r.position for r in records] == acked and [r.sequence for r in records] == list(range(200))
            assert client._owners[(ns, name)] == other.stream_address

            with pytest.raises((StreamUnavailable, WriterFenced)):
                await writer.append(b"to a dead broker")
            successor = await client.open_writer(ns, name)
            position = await successor.append(b"after the failover")
            info = await client.get_info(ns, name)
            assert info.last_position == position and info.next_sequence == 201
            assert position.ledger_id not in {p.ledger_id for p in acked}  # the new owner writes a new ledger
            await successor.close()
            await writer.close()
    finally:
        for b in brokers:
            b.stop()


async def test_a_namespace_with_e3_qw3_qa2_puts_each_write_set_on_three_zones(start_bookies, tmp_path, names):
    ns, name = names
    cluster = start_bookies(6)  # two bookies in each of three zones
    zone_of = {b.bookie_id: b.zone for b in cluster.bookies}
    broker = start_broker(tmp_path, cluster.metadata_url).start(60)
    try:
        async with StreamClient(broker.stream_address) as client:
            await client.create_namespace(ns, ensemble_size=3, write_quorum=3, ack_quorum=2, min_zones=3,
                                          rolling_max_entries=10)
            await client.create_stream(ns, name)
            writer = await client.open_writer(ns, name)
            for i in range(45):
                await writer.append(f"{i}".encode())
            info = await client.get_info(ns, name)
            ledgers = [l for l in info.ledgers if l["entries"]]
            assert len(ledgers) >= 4
            async with await LedgerClient.open(cluster.metadata_url) as ledger_client:
                for ledger in ledgers:
                    md, _ = await ledger_client.get_metadata(ledger["ledger_id"])
                    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (3, 3, 2)
                    for entry in range(ledger["entries"]):
                        write_set = md.write_set(entry)
                        assert len({zone_of[b] for b in write_set}) == 3, (ledger, entry, write_set)
            await writer.close()
    finally:
        broker.stop()


async def test_a_namespace_whose_min_zones_the_bookies_cannot_meet_is_refused(start_bookies, tmp_path, names):
    ns, name = names
    cluster = start_bookies(4, zones=("zone-a", "zone-b"))
    zone_of = {b.bookie_id: b.zone for b in cluster.bookies}
    broker = start_broker(tmp_path, cluster.metadata_url).start(60)
    try:
        async with StreamClient(broker.stream_address) as client:
            with pytest.raises(PlacementUnsatisfiable, match="min_zones=3"):
                await client.create_namespace(ns, ensemble_size=3, write_quorum=3, ack_quorum=2, min_zones=3)
            with pytest.raises(NamespaceNotFound):
                await client.get_namespace(ns)
            await client.create_namespace(ns, ensemble_size=3, write_quorum=3, ack_quorum=2, min_zones=2)
            await client.create_stream(ns, name)
            writer = await client.open_writer(ns, name)
            await writer.append(b"on two zones")
            ledger = (await client.get_info(ns, name)).ledgers[-1]["ledger_id"]
            async with await LedgerClient.open(cluster.metadata_url) as ledger_client:
                md, _ = await ledger_client.get_metadata(ledger)
                assert len({zone_of[b] for b in md.write_set(0)}) == 2
            await writer.close()
    finally:
        broker.stop()


async def test_a_namespaces_min_zones_is_enforced_on_the_ledgers_its_streams_create(start_bookies, tmp_path, names):
    """The cluster-wide rule is soft (place on fewer zones with a warning); the namespace's minimum is not."""
    ns, name = names
    cluster = start_bookies(4)  # zone-a, zone-b, zone-c, zone-a
    broker = start_broker(tmp_path, cluster.metadata_url).start(60)
    try:
        async with StreamClient(broker.stream_address) as client:
            await client.create_namespace(ns, ensemble_size=3, write_quorum=3, ack_quorum=2, min_zones=3)
            await client.create_stream(ns, name)
            zone_c = next(b for b in cluster.bookies if b.zone == "zone-c")
            zone_c.stop()
            async with await LedgerClient.open(cluster.metadata_url) as ledger_client:
                await wait_until_async(lambda: _unregistered(ledger_client, zone_c.bookie_id), 30,
                                      "the zone-c bookie to unregister")
            with pytest.raises(PlacementUnsatisfiable):
                writer = await client.open_writer(ns, name)  # its first ledger needs three zones, two are left
                await writer.append(b"must not land on two zones")
    finally:
        broker.stop()


async def _unregistered(ledger_client, bookie_id: str) -> bool:
    await ledger_client.registry.refresh()
    return bookie_id not in {b.bookie_id for b in ledger_client.registry.bookies()}
