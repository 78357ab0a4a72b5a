"""The console's cluster views on a real cluster: ZooKeeper, three bookie processes and a `broker start` process
(which serves the console page too). A stopped bookie shows as down (its cookie stays, its registration goes),
the auditor's under-replication marks are listed and counted in the health, and the metadata browser reads
ZooKeeper's own ephemeral flags and decodes a msgpack node."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import msgpack

from storage.autorecovery.underreplication import Mark, UnderReplication
from storage.metadata import open_store
from storage.testing.processes import BrokerProcess
from storage.testing.waiting import wait_until

V1 = "/admin/magnetar/v1"


def get(broker, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}{path}", timeout=30) as answer:
        return json.loads(answer.read())


def in_store(url: str, action) -> None:
    """Run ``action(store)`` on a session of the cluster's metadata store (ZooKeeper) of its own."""
    async def go():
        store = await open_store(url)
        try:
            await action(store)
        finally:
            await store.close()

    asyncio.run(go())


def mark_under_replicated(url: str, ledger_id: int, missing: str) -> None:
    in_store(url, lambda store: UnderReplication(store).mark(ledger_id, Mark(missing=frozenset({missing}))))


def test_a_stopped_bookie_is_down_and_marked_ledgers_are_amber(start_bookies, tmp_path):
    # No autorecovery: its worker would resolve the test's mark (ledger 4242 does not exist) before it is read.
    cluster = start_bookies(3, env={"MAGNETAR_BOOKIE_AUTORECOVERY_ENABLED": "false"})
    broker = BrokerProcess(tmp_path / "broker", metadata_url=cluster.metadata_url)
    broker.start(timeout_s=60)
    try:
        # Every broker serves the console, not only the standalone.
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/console/", timeout=30) as answer:
            assert answer.status == 200 and b"<title>Magnetar console</title>" in answer.read()
        victim = cluster.bookies[2].bookie_id
        assert not [f for f in get(broker, f"{V1}/health")["findings"] if victim in f["subject"]]
        mark_under_replicated(cluster.metadata_url, 4242, victim)
        cluster.bookies[2].stop()

        rows = wait_until(lambda: (doc := get(broker, f"{V1}/bookies")) and
                          {b["bookieId"]: b["state"] for b in doc["bookies"]}.get(victim) == "down" and doc,
                          30, "the stopped bookie to show as down")
        assert sorted(b["state"] for b in rows["bookies"]) == ["down", "writable", "writable"]
        assert rows["underReplicated"] == {"count": 1, "ledgers": [
            {"ledgerId": 4242, "missing": [victim], "replace": [], "check": False}]}
        health = get(broker, f"{V1}/health")
        assert health["status"] in ("amber", "red")
        assert {(f["subject"], f["reason"]) for f in health["findings"]} >= {
            (f"bookie {victim}", "down: registered no more (its cookie remains)"),
            ("ledgers", "1 ledger is under-replicated: autorecovery copies their fragments to other bookies")}

        live = cluster.bookies[0].bookie_id
        node = get(broker, f"{V1}/metadata?path=/ledgers/available/{live}")
        assert node["ephemeral"] and node["ephemeralOwner"] != "0x0" and node["data"]["value"]["bookie_id"] == live
        # A node holding msgpack is decoded (and its secrets redacted) as the JSON ones are.
        packed = msgpack.packb({"ensemble": ["a", "b"], "password": b"s3cret"})
        in_store(cluster.metadata_url, lambda store: store.create("/console-test/packed", packed, make_parents=True))
        node = get(broker, f"{V1}/metadata?path=/console-test/packed")
        assert node["data"]["encoding"] == "msgpack" and not node["ephemeral"] and node["version"] == 0
        assert node["data"]["value"] == {"ensemble": ["a", "b"], "password": "<redacted>"}
        cookies = get(broker, f"{V1}/metadata?path=/ledgers/cookies")
        assert victim in cookies["children"]
        assert not get(broker, f"{V1}/metadata?path=/ledgers/cookies/{victim}")["ephemeral"]
    finally:
        broker.stop()
