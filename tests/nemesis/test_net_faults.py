"""Network partitions against real processes behind the fault-injecting proxy.

* the proxy's pure decisions, from tables;
* a partitioned bookie: its traffic is blackholed (a connection is accepted and then silent, never
  refused), its ZooKeeper session expires, the writer replaces it in the ensemble and loses nothing, and
  after healing it registers again;
* a partitioned broker: its ZooKeeper session expires, the other broker takes its topic, producers go on
  there, and after healing every acknowledged message is read back exactly once, in order.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import uuid

import pulsar
import pytest

from loadtest.nemesis.net_faults import NET_FAULTS, PartitionBookie, PartitionBroker
from loadtest.nemesis.process_faults import registered
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.testing.netproxy import Rules, is_held, loopback_sockets
from storage.testing.processes import NetProxyProcess, http_json
from storage.testing.waiting import wait_until, wait_until_async
from tests.cluster.support import client as pulsar_client, lookup, owner_of
from tests.nemesis.fault_fixtures import fault_cluster  # noqa: F401  (fixture)

FAST = ClientConfig(add_entry_timeout_s=3.0, read_timeout_s=3.0, connect_timeout_s=2.0)
SHORT_BOOKIE_SESSION = {"MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": "3"}


@pytest.mark.parametrize("link, pid, rules, held", [
    ("bookie-1", 10, Rules(), False),
    ("bookie-1", 10, Rules(links=frozenset({"bookie-1"})), True),  # every connection to an isolated server
    ("bookie-2", 10, Rules(links=frozenset({"bookie-1"})), False),
    ("zookeeper", 10, Rules(pids=frozenset({10})), True),  # every connection an isolated process opened
    ("zookeeper", 11, Rules(pids=frozenset({10})), False),
    ("zookeeper", None, Rules(pids=frozenset({10})), False),  # not attributable: a client outside the cluster
])
def test_which_connections_a_partition_holds(link, pid, rules, held):
    assert is_held(link, pid, rules) is held


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 20 4 30 10 -1
   1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1
"""


def test_the_client_end_of_a_loopback_connection_is_found_in_proc_net_tcp():
    # Each end of a loopback connection is a socket of its own: (local port, remote port) tells them apart.
    assert loopback_sockets(PROC_NET_TCP) == {(0xA1B2, 0x1F90): 4242, (0x1F90, 0xA1B2): 4343}


@pytest.fixture
def echo_server():
    """A loopback echo server on a thread: what the proxy forwards to in the proxy's own tests."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")],
                             daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_the_proxy_holds_a_partitioned_processs_connections_and_delivers_after_healing(tmp_path, echo_server):
    proxy = NetProxyProcess(tmp_path).start()
    try:
        port = proxy.front("echo", echo_server)
        old = socket.create_connection(("127.0.0.1", port), timeout=5)
        old.sendall(b"before")
        assert old.recv(16) == b"before"
        rules = proxy.partition(pids=[os.getpid()])  # this test's process is the isolated one
        assert rules["links"]["echo"]["held"] == 1
        old.sendall(b"during")
        new = socket.create_connection(("127.0.0.1", port), timeout=5)  # accepted: dropped, not refused
        new.sendall(b"new")
        for sock in (old, new):
            sock.settimeout(1)
            with pytest.raises(socket.timeout):
                sock.recv(16)
        assert proxy.describe()["links"]["echo"]["held"] == 2
        proxy.heal()
        old.settimeout(5)
        new.settimeout(5)
        assert old.recv(16) == b"during" and new.recv(16) == b"new"  # nothing lost, as after TCP retransmission
        # Holding a link holds every client, attributable or not.
        proxy.partition(links=["echo"])
        old.sendall(b"x")
        old.settimeout(1)
        with pytest.raises(socket.timeout):
            old.recv(16)
        old.close()
        new.close()
    finally:
        proxy.stop()


def test_the_proxy_refuses_bad_links_and_rules(tmp_path):
    proxy = NetProxyProcess(tmp_path).start()
    try:
        for bad in ({"name": "", "listen_port": 1, "target_port": 2}, {"name": "x", "listen_port": 0, "target_port": 2},
                    {"name": "x", "listen_port": 70000, "target_port": 2}, {"name": "x"}):
            with pytest.raises(RuntimeError, match="400"):
                http_json("POST", f"http://127.0.0.1:{proxy.control_port}/links", bad)
        with pytest.raises(RuntimeError, match="400"):
            proxy.partition(links=["no-such-link"])
        with pytest.raises(RuntimeError, match="400"):
            proxy.partition(pids=[-1])
    finally:
        proxy.stop()


def test_net_faults_are_registered_by_kind():
    assert [f.kind for f in NET_FAULTS] == ["partition-bookie", "partition-broker"]
    assert (PartitionBookie.bookie_faults, PartitionBroker.broker_faults) == (1, 1)


def test_partitions_need_the_proxy(fault_cluster):
    cluster = fault_cluster(bookies=1, proxy=False)
    assert not PartitionBookie().applicable(cluster) and not PartitionBroker().applicable(cluster)


def _answers(port: int, request: bytes, timeout_s: float = 1.5) -> bool:
    """Whether a request to ``port`` gets any answer (data, or the connection closed or reset) in time.
    Behind a blackhole the connection is accepted and then nothing comes back at all."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        sock.settimeout(timeout_s)
        try:
            sock.recv(1)
        except socket.timeout:
            return False
        except ConnectionError:
            pass
        return True


BAD_FRAME = b"\x00\x00\x00\x04ping"  # a bookie answers a malformed frame (an error, or it hangs up)
HEALTH = b"GET /health HTTP/1.0\r\n\r\n"


async def test_a_partitioned_bookie_is_blackholed_replaced_in_the_ensemble_and_rejoins(fault_cluster):
    cluster = fault_cluster(bookies=4, bookie_env=SHORT_BOOKIE_SESSION)
    client = await LedgerClient.open(cluster.metadata_url, FAST)
    await client.registry.wait_for(lambda r: len(r.writable()) >= 4, 15)
    handle = await client.create_ledger(3, 3, 2)
    payloads = [f"entry-{i}".encode() for i in range(60)]
    for data in payloads[:10]:
        await handle.add_entry(data)
    victim = cluster.bookies.by_id(handle.ensemble[1])
    assert await asyncio.to_thread(_answers, victim.advertised_port, BAD_FRAME)
    fault = PartitionBookie(victim)
    injected = await asyncio.to_thread(fault.inject, cluster, random.Random(7))
    assert injected.target == victim.name and id(victim) in cluster.busy

    assert not await asyncio.to_thread(_answers, victim.advertised_port, BAD_FRAME)  # dropped, not refused
    assert await asyncio.to_thread(_answers, victim.port, BAD_FRAME)  # the bookie itself still serves
    for data in payloads[10:40]:
        await handle.add_entry(data)  # Qa 2 of 3: the adds go on; the silent bookie's adds time out

    async def replaced():
        md, _ = await client.get_metadata(handle.ledger_id)
        return victim.bookie_id not in md.current_ensemble
    await wait_until_async(replaced, 30, "the writer to replace the partitioned bookie in its ensemble")
    # Cut off from ZooKeeper too: its session expires and its registration goes, while the process lives on.
    await client.registry.wait_for(lambda r: not r.is_registered(victim.bookie_id), 30)
    assert victim.alive and victim.is_healthy()
    held = (await asyncio.to_thread(cluster.proxy.describe))["links"][victim.link_name]["held"]
    assert held >= 1
    for data in payloads[40:]:
        await handle.add_entry(data)

    await asyncio.to_thread(fault.heal, cluster)
    await client.registry.wait_for(lambda r: victim.bookie_id in {b.bookie_id for b in r.writable()}, 30)
    assert (await asyncio.to_thread(cluster.proxy.describe))["rules"] == {"links": [], "pids": []}
    assert not cluster.busy
    await handle.close()
    reader = await client.open_ledger(handle.ledger_id, recovery=False)
    assert [e.payload for e in await reader.read_entries(0, 59)] == payloads
    await reader.close()
    await client.close()


def test_an_isolated_bookie_restarted_meanwhile_stays_isolated(fault_cluster):
    """The isolation names the process, not the pid it had: a bookie killed and started again while partitioned
    (as another fault may do) must not reach ZooKeeper from its new pid until the partition heals. Cut off, the
    new incarnation gives up on ZooKeeper and exits, as a partitioned machine's reboot would; healed, it starts."""
    cluster = fault_cluster(bookies=1, bookie_env=SHORT_BOOKIE_SESSION)
    (victim,) = cluster.bookies.bookies
    fault = PartitionBookie(victim)
    fault.inject(cluster, random.Random(7))
    victim.kill9()
    old_pid = victim.proc.pid
    victim.spawn()
    assert cluster.proxy.describe()["rules"]["pids"] == [victim.proc.pid] != [old_pid]
    wait_until(lambda: victim.proc.poll() is not None, 60,
               lambda: f"the restarted bookie to give up on ZooKeeper; it runs on: {victim.log_tail(5)}")
    assert "cannot connect to ZooKeeper" in victim.log_tail(5)
    fault.heal(cluster)
    assert cluster.proxy.describe()["rules"] == {"links": [], "pids": []}
    victim.start(60)
    wait_until(lambda: registered(cluster, f"/ledgers/available/{victim.bookie_id}"), 30,
               "the bookie to register once the partition healed")


def test_a_partitioned_broker_loses_its_topic_to_the_other_and_nothing_acknowledged_is_lost(fault_cluster):
    cluster = fault_cluster(bookies=3, brokers=2)
    topic = f"persistent://public/default/partition-{uuid.uuid4().hex[:8]}"
    owner = owner_of(cluster.brokers, topic)
    survivor = next(b for b in cluster.brokers if b is not owner)
    before = pulsar_client(survivor.service_url)  # enters through the survivor, redirected to the owner's link
    before.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = before.create_producer(topic, batching_enabled=False, send_timeout_millis=5_000)
    sent = [f"m-{i}".encode() for i in range(40)]
    for data in sent[:20]:
        producer.send(data)

    assert _answers(owner.advertised_http_port, HEALTH)
    fault = PartitionBroker(owner)
    fault.inject(cluster, random.Random(11))
    assert not _answers(owner.advertised_http_port, HEALTH)  # dropped, not refused
    assert _answers(owner.http_port, HEALTH)
    # Its metadata session expires; the survivor takes the topic over.
    wait_until(lambda: lookup(survivor, topic) == survivor.service_url, 60,
               "the survivor to own the partitioned broker's topic")
    after = pulsar_client(survivor.service_url)
    try:
        moved = after.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        for data in sent[20:]:
            moved.send(data)
        assert owner.alive

        fault.heal(cluster)
        assert lookup(owner, topic) == survivor.service_url  # the healed broker does not claim it back
        consumer = after.subscribe(topic, "audit")
        got = []
        while True:
            try:
                msg = consumer.receive(timeout_millis=3_000)
            except pulsar.Timeout:
                break
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent  # every acknowledged message, once, in order; nothing from the isolated owner
    finally:
        after.close()
        before.close()
