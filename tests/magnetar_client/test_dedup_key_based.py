"""Key-based batching on a topic with deduplication: every message is stored (nemesis seed 2).

Key batches hold interleaved sequence ids. Sent under their lowest ids, the second key's batch looked like a
duplicate of the first's (its lowest id was below the highest the first pushed), so the broker answered it with
a duplicate's receipt and never stored it: acknowledged, then lost. Found by ``python -m loadtest.nemesis --seed 2
--rounds 5`` after a ZooKeeper outage let a backlog of sends batch up by key.
"""

from __future__ import annotations

import uuid

import magnetar
from tests.official_client.support import admin_call, receive_n


def test_seed_2_key_based_batches_on_a_dedup_topic_are_all_stored(standalone):
    ns = f"dedup-kb-{uuid.uuid4().hex[:6]}"
    admin_call(standalone, "PUT", f"/admin/v2/namespaces/public/{ns}")
    admin_call(standalone, "POST", f"/admin/v2/namespaces/public/{ns}/deduplication", True)
    topic = f"persistent://public/{ns}/orders"
    client = magnetar.Client(standalone.service_url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="kb-1", batching_enabled=True,
                                          batching_type=magnetar.BatchingType.KeyBased,
                                          batching_max_publish_delay_ms=200)
        receipts = []
        for i in range(40):  # four keys, interleaved: every key batch overlaps the others' id ranges
            producer.send_async(f"{i}".encode(), lambda res, mid: receipts.append((res, mid)), partition_key=f"k{i % 4}")
        producer.flush()
        assert len(receipts) == 40 and all(res == magnetar.Result.Ok for res, _ in receipts)
        assert all(mid.ledger_id() >= 0 for _, mid in receipts), "a message was answered as a duplicate"
        got = sorted(int(m.data()) for m in receive_n(consumer, 40))
        assert got == list(range(40))
    finally:
        client.close()
