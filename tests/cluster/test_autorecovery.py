"""Autorecovery with real processes: ZooKeeper, bookie processes in three zones, a broker, the official client.

A bookie killed for good has every fragment it held re-replicated (zone rule
kept, bytes identical) within a bounded time, so a second loss loses
nothing (DESIGN invariant 8); the auditor's death mid-repair does not stop
the repair.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import urllib.request

import pulsar

from storage.autorecovery import checker
from storage.autorecovery.underreplication import AUDITOR, UnderReplication
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.ledger_metadata import LedgerMetadata
from storage.metadata import open_store
from storage.testing.processes import VENV_BIN, ServiceProcess, free_port
from storage.testing.waiting import wait_until, wait_until_async
from tests.cluster.support import Production
from tests.official_client.support import distinct_in_order, receive_n

DELAY_S = 2
FAST_RECOVERY = {
    "MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": str(DELAY_S),
    "MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": "2",
    "MAGNETAR_BOOKIE_REPLICATION_POLL_INTERVAL_S": "0.2",
}
ZONES = ("zone-a", "zone-b", "zone-c", "zone-a")
TOPICS = [f"persistent://public/default/recovery-{i}" for i in range(3)]
PER_TOPIC = 1000
ROUNDS = 3


def shell(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "bookie"), "--log-level", "WARNING", "shell", *args, "--metadata-store", url],
                          capture_output=True, text=True, timeout=120)


async def snapshot(url: str) -> dict[int, tuple[LedgerMetadata, dict[int, bytes]]]:
    """Every ledger's metadata and, per entry up to what is readable, the packaged body of each replica."""
    async with await LedgerClient.open(url, ClientConfig(read_timeout_s=5.0, connect_timeout_s=2.0)) as client:
        await client.registry.refresh()
        out = {}
        for lid in await client.list_ledgers():
            md, _ = await client.get_metadata(lid)
            out[lid] = (md, await replica_bodies(client, md))
        return out


async def replica_bodies(client: LedgerClient, md: LedgerMetadata) -> dict[int, bytes]:
    """entry id -> body, asserting every live replica of its write set holds exactly the same bytes."""
    last = md.last_entry_id if md.is_closed else await _lac(client, md)
    bodies: dict[int, bytes] = {}
    live = {b.bookie_id for b in client.registry.bookies()}
    for eid in range(last + 1):
        copies = {}
        for bookie in md.write_set(eid):
            if bookie in live:
                copies[bookie] = (await client.context.pool.read(bookie, md.ledger_id, eid)).body
        assert copies and len(set(copies.values())) == 1, f"ledger {md.ledger_id} entry {eid}: replicas differ"
        bodies[eid] = next(iter(copies.values()))
    return bodies


async def _lac(client: LedgerClient, md: LedgerMetadata) -> int:
    reader = await client.open_ledger(md.ledger_id, recovery=False, password=md.password)
    lac = reader.last_add_confirmed
    await reader.close()
    return lac


def produce(broker, sent: dict[str, list[bytes]]) -> None:
    """PER_TOPIC messages per topic in ROUNDS rounds, unloading every topic between rounds so ledgers close."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for topic in TOPICS:  # durable subscriptions first: they keep every message
            client.subscribe(topic, "keep").close()
        for r in range(ROUNDS):
            for topic in TOPICS:
                producer = client.create_producer(topic, batching_enabled=False)
                count = PER_TOPIC // ROUNDS + (PER_TOPIC % ROUNDS if r == ROUNDS - 1 else 0)
                for _ in range(count):
                    body = f"{topic[-1]}-{len(sent[topic]):05d}".encode() * 8
                    producer.send_async(body, None)
                    sent[topic].append(body)
                producer.flush()
                producer.close()
            for topic in TOPICS:
                name = topic.split("://", 1)[1]
                req = urllib.request.Request(f"{broker.web_url}/admin/v2/persistent/{name}/unload", method="PUT")
                urllib.request.urlopen(req, timeout=60).close()
    finally:
        client.close()


def consume_all(broker, sent: dict[str, list[bytes]]) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for topic in TOPICS:
            consumer = client.subscribe(topic, "keep")
            got = [m.data() for m in receive_n(consumer, len(sent[topic]), timeout_s=90)]
            assert got == sent[topic], f"{topic}: messages lost or out of order"
            consumer.close()
    finally:
        client.close()


def fully_repaired(url: str, dead: set[str]) -> bool:
    if shell(url, "listunderreplicated").stdout.strip():
        return False
    names = asyncio.run(_bookies_named(url))
    return not (names & dead)


async def _bookies_named(url: str) -> set[str]:
    async with await LedgerClient.open(url) as client:
        named: set[str] = set()
        for lid in await client.list_ledgers():
            named |= checker.bookies_of((await client.get_metadata(lid))[0])
        return named


def test_lost_bookie_is_rereplicated_and_a_second_loss_loses_no_message(start_bookies, start_brokers):
    cluster = start_bookies(4, zones=ZONES, env=FAST_RECOVERY)
    url = cluster.metadata_url
    (broker,) = start_brokers(1, metadata_url=url)
    sent: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    produce(broker, sent)
    assert sum(map(len, sent.values())) == 3000

    before = asyncio.run(snapshot(url))
    assert sum(md.is_closed for md, _ in before.values()) >= 6, "unloads must have closed several ledgers"
    victim = max(cluster.bookies, key=lambda b: sum(b.bookie_id in checker.bookies_of(md) for md, _ in before.values()))
    held = [lid for lid, (md, bodies) in before.items() if md.is_closed and bodies and victim.bookie_id in checker.bookies_of(md)]
    assert held, "the victim must hold closed ledgers with entries"
    victim.kill9()
    wait_until(lambda: fully_repaired(url, {victim.bookie_id}), 60 + DELAY_S + 10,
               f"every ledger on {victim.bookie_id} re-replicated")

    zone_of = {b.bookie_id: b.zone for b in cluster.bookies}
    after = asyncio.run(snapshot(url))
    listed = shell(url, "listledgers").stdout.split()
    assert sorted(map(int, listed)) == sorted(after)
    for lid, (md, bodies) in after.items():
        assert victim.bookie_id not in checker.bookies_of(md)
        for first, ensemble in md.ensembles:
            for s in range(len(ensemble)):
                ws = [ensemble[(s + k) % len(ensemble)] for k in range(md.write_quorum_size)]
                assert len({zone_of[b] for b in ws}) >= 2, f"ledger {lid} fragment {first}: {ws} in one zone"
        if lid in before:
            old = before[lid][1]
            assert {e: bodies[e] for e in old} == old, f"ledger {lid}: bytes changed by re-replication"
    for lid in sorted(after)[:3]:
        info = shell(url, "ledger", str(lid)).stdout
        for bookie in checker.bookies_of(after[lid][0]):
            assert bookie in info, f"`ledger {lid}` does not name {bookie}"

    survivors = [b for b in cluster.bookies if b.alive]
    assert sum(metric(b.http_port, "bookie_autorecovery_rereplicated_bytes_total") for b in survivors) > 0
    assert all(metric(b.http_port, "bookie_autorecovery_under_replicated_ledgers") == 0 for b in survivors)

    second = next(b for b in cluster.bookies if b.alive)
    second.kill9()
    consume_all(broker, sent)


def metric(http_port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_decommission_of_a_live_bookie_under_production_loses_nothing(start_bookies, start_brokers):
    cluster = start_bookies(4, zones=ZONES, env=FAST_RECOVERY)
    url = cluster.metadata_url
    (broker,) = start_brokers(1, metadata_url=url)
    topic = "persistent://public/default/decommission"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        client.subscribe(topic, "keep").close()
        production = Production(pulsar, [client.create_producer(topic, batching_enabled=False)])
        try:
            production.wait_for_more(200, 60, "production to start")
            named = asyncio.run(_bookies_named(url))
            victim = next(b for b in cluster.bookies if b.bookie_id in named)
            done = shell(url, "decommissionbookie", victim.bookie_id, "--timeout-s", "90")
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"no ledger has data on {victim.bookie_id}" in done.stdout
            production.wait_for_more(200, 60, "production to go on after the decommission")
        finally:
            production.stop()
        assert victim.bookie_id not in asyncio.run(_bookies_named(url))
        victim.kill9()  # it held nothing any more
        consumer = client.subscribe(topic, "keep")
        acked = production.acked[0]
        assert distinct_in_order(consumer, len(acked), timeout_s=60) == acked
    finally:
        client.close()


def test_recover_rereplicates_a_dead_bookie_at_once_without_waiting_for_the_delay(start_bookies):
    # A recovery delay no test waits out: only `recover` can explain a repair.
    cluster = start_bookies(4, zones=ZONES, env={**FAST_RECOVERY, "MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": "3600"})
    url = cluster.metadata_url

    async def write() -> None:
        async with await LedgerClient.open(url) as client:
            await client.registry.wait_for(lambda reg: len(reg.writable()) >= 4, 15)
            for n in range(6):
                h = await client.create_ledger(2, 2, 2, password=b"pw")
                await asyncio.gather(*(h.add_entry_async(bytes([n]) * 1000) for _ in range(100)))
                await h.close()

    asyncio.run(write())
    before = asyncio.run(snapshot(url))
    victim = max(cluster.bookies, key=lambda b: sum(b.bookie_id in checker.bookies_of(md) for md, _ in before.values()))
    victim.kill9()
    done = shell(url, "recover", victim.bookie_id, "--timeout-s", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"marked \d+ ledgers with fragments on {re.escape(victim.bookie_id)}", done.stdout)
    assert victim.bookie_id not in asyncio.run(_bookies_named(url))
    assert shell(url, "listunderreplicated").stdout == ""
    after = asyncio.run(snapshot(url))
    assert {lid: bodies for lid, (_, bodies) in after.items()} == {lid: bodies for lid, (_, bodies) in before.items()}


class AutoRecoveryProcess(ServiceProcess):
    """`bookie autorecovery` on a free HTTP port."""

    def __init__(self, metadata_url: str, root, name: str, env: dict):
        self.metadata_url, self.root, self.owner, self.env = metadata_url, root, name, env
        self.http_port = free_port()
        self.proc = None

    @property
    def name(self) -> str:
        return f"autorecovery {self.owner}"

    @property
    def log_path(self):
        return self.root / f"{self.owner}.log"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/health"

    def command(self) -> list[str]:
        return [str(VENV_BIN / "bookie"), "autorecovery", "--metadata-store", self.metadata_url,
                "--http-port", str(self.http_port), "--id", self.owner]

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        return float(match.group(1)) if match else 0.0


def test_auditor_killed_mid_repair_and_repair_still_completes(start_bookies, tmp_path):
    env = {**FAST_RECOVERY, "MAGNETAR_BOOKIE_AUTORECOVERY_ENABLED": "false"}
    cluster = start_bookies(4, zones=ZONES, env=env)
    url = cluster.metadata_url
    recoverers = [AutoRecoveryProcess(url, tmp_path, f"ar-{i}", FAST_RECOVERY) for i in range(2)]
    for r in recoverers:
        r.start()

    async def write() -> list[int]:
        async with await LedgerClient.open(url) as client:
            await client.registry.wait_for(lambda reg: len(reg.writable()) >= 4, 15)
            ids = []
            for n in range(12):
                h = await client.create_ledger(2, 2, 2, password=b"pw")
                await asyncio.gather(*(h.add_entry_async(bytes([n]) * 4096) for _ in range(300)))
                await h.close()
                ids.append(h.ledger_id)
            return ids

    asyncio.run(write())
    before = asyncio.run(snapshot(url))
    victim = max(cluster.bookies, key=lambda b: sum(b.bookie_id in checker.bookies_of(md) for md, _ in before.values()))

    async def auditor_name() -> str | None:
        async with await LedgerClient.open(url) as client:
            try:
                return (await client.context.store.get(AUDITOR))[0].decode()
            except Exception:
                return None

    auditor = next(r for r in recoverers if r.owner == wait_until(lambda: asyncio.run(auditor_name()), 15, "an auditor"))
    other = next(r for r in recoverers if r is not auditor)
    victim.kill9()

    async def kill_auditor_once_marking_began() -> list[int]:
        store = await open_store(url)
        marks = UnderReplication(store)
        try:
            await wait_until_async(marks.list, 30, "the auditor to mark under-replicated ledgers")
            auditor.kill9()
            return await marks.list()
        finally:
            await store.close()

    assert asyncio.run(kill_auditor_once_marking_began()), "the auditor died before the repair was done"
    wait_until(lambda: fully_repaired(url, {victim.bookie_id}), 60 + DELAY_S + 10, "repair after auditor failover")
    # The survivor takes the auditor's place once the dead one's session expires.
    wait_until(lambda: asyncio.run(auditor_name()) == other.owner, 30, f"{other.owner} to become the auditor")
    after = asyncio.run(snapshot(url))
    for lid, (md, bodies) in after.items():
        assert bodies == before[lid][1]
    assert other.metric("bookie_autorecovery_under_replicated_ledgers") == 0
    other.stop()
